fn main() {
    std::process::exit(fencecheck::cli::main());
}
