#!/usr/bin/env bash
# On the GPU machine: unpack the carried .device-bin/irc.xz (the stripped release binary,
# xz-compressed to fit a call's 64 MiB; bench/gpu/NOTES.md, session 13) into .device-bin/irc.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -x .device-bin/irc ] || [ .device-bin/irc.xz -nt .device-bin/irc ]; then
    xz -d -k -f .device-bin/irc.xz 2>/dev/null \
        || python3 -c "import lzma, shutil; shutil.copyfileobj(lzma.open('.device-bin/irc.xz'), open('.device-bin/irc', 'wb'))"
    chmod +x .device-bin/irc
fi
.device-bin/irc --version
