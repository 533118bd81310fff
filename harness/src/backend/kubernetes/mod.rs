pub mod reaper;
