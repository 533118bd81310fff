#!/bin/sh
# A client whose library cannot even load: it exits before its hello.
echo "ImportError: no module named lockthing" >&2
exit 4
