# Sourced by the process tests of this folder (test_service.sh,
# test_syncer_restart.sh, test_world.sh, test_end.sh, test_launch_restart.sh):
# a work directory removed on exit, `pids` (every background process started; all killed
# with SIGKILL on exit), and `port` (a free loopback TCP port).
#   source processes.sh NAME   # work directory ${TMPDIR:-/tmp}/NAME.XXXXXX
work=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
