# Curator adapter (clients/curator): sourced by ci/bootstrap.sh, which provides say,
# die and apt_install. Checks the jars the launcher (clients/curator/curator) puts on
# its classpath and a javac 17, installs the Debian packages that are missing, and
# compiles Client.java into clients/curator/classes/ when that is missing or older
# than the source.
CURATOR_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CURATOR_J=/usr/share/java
# jar -> the Debian package that ships it (dpkg -L).
curator_missing=""
for curator_pair in \
  curator-recipes.jar:libcurator-recipes-java \
  curator-framework.jar:libcurator-framework-java \
  curator-client.jar:libcurator-client-java \
  zookeeper.jar:libzookeeper-java \
  zookeeper-jute.jar:libzookeeper-java \
  guava.jar:libguava-java \
  jackson-databind.jar:libjackson2-databind-java \
  jackson-core.jar:libjackson2-core-java \
  jackson-annotations.jar:libjackson2-annotations-java \
  slf4j-api.jar:libslf4j-java \
  slf4j-simple.jar:libslf4j-java; do
  [ -f "$CURATOR_J/${curator_pair%%:*}" ] || curator_missing="$curator_missing ${curator_pair#*:}"
done
if [ -n "$curator_missing" ]; then
  say "curator adapter: jars missing, installing:$curator_missing"
  # shellcheck disable=SC2086
  apt_install $(printf '%s\n' $curator_missing | sort -u)
fi
curator_version="$(dpkg-query -W -f='${Version}' libcurator-recipes-java 2>/dev/null || true)"
case "$curator_version" in
  5.*) say "curator: libcurator-recipes-java $curator_version" ;;
  *) die "curator adapter needs Curator 5.x (libcurator-recipes-java), found '${curator_version:-none}'" ;;
esac

# javac 17: the one on PATH if it is 17, else Debian's openjdk-17 one.
curator_javac17() {
  for j in "$(command -v javac 2>/dev/null)" /usr/lib/jvm/java-17-openjdk-*/bin/javac; do
    [ -n "$j" ] && [ -x "$j" ] && prints '^javac 17\.' "$j" -version && { echo "$j"; return 0; }
  done
  return 1
}
CURATOR_JAVAC="$(curator_javac17 || true)"
if [ -z "$CURATOR_JAVAC" ]; then
  say "javac 17 missing (the Curator adapter is compiled here): Debian's openjdk-17-jdk-headless"
  apt_install openjdk-17-jdk-headless
  CURATOR_JAVAC="$(curator_javac17)" || die "javac 17 still missing after installing openjdk-17-jdk-headless"
fi
prints 'version "17\.' /usr/bin/java -version \
  || die "/usr/bin/java is not Java 17 (the Curator adapter runs on it): $(/usr/bin/java -version 2>&1 | head -1)"

if [ ! -f "$CURATOR_DIR/classes/Client.class" ] \
  || [ "$CURATOR_DIR/Client.java" -nt "$CURATOR_DIR/classes/Client.class" ]; then
  say "curator adapter: compiling Client.java with $CURATOR_JAVAC"
  rm -rf "$CURATOR_DIR/classes.tmp"
  "$CURATOR_JAVAC" -Xlint:all,-path -Werror -implicit:none -d "$CURATOR_DIR/classes.tmp" \
    -cp "$CURATOR_J/curator-recipes.jar:$CURATOR_J/curator-framework.jar:$CURATOR_J/curator-client.jar:$CURATOR_J/zookeeper.jar:$CURATOR_J/zookeeper-jute.jar:$CURATOR_J/jackson-databind.jar:$CURATOR_J/jackson-core.jar:$CURATOR_J/jackson-annotations.jar" \
    "$CURATOR_DIR/Client.java" || die "curator adapter: javac failed"
  # Swap in whole, so a launcher starting meanwhile never sees half a build.
  rm -rf "$CURATOR_DIR/classes" && mv "$CURATOR_DIR/classes.tmp" "$CURATOR_DIR/classes"
fi
say "curator adapter: $CURATOR_DIR/classes"
unset CURATOR_DIR CURATOR_J CURATOR_JAVAC curator_missing curator_pair curator_version
unset -f curator_javac17
