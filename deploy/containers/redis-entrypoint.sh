#!/bin/sh
# Entrypoint of the local Redis image, with the official image's conventions:
# arguments that start with "-" (or name a .conf file) are flags for
# redis-server; without a config file, Debian's redis-server binds to every
# interface but refuses remote clients (protected mode), so turn that off as
# the official image does.
set -e
case "${1:-}" in
  -* | *.conf) set -- redis-server "$@" ;;
esac
if [ "${1:-}" = redis-server ]; then
  case "${2:-}" in
    *.conf) ;;
    *) shift; set -- redis-server --protected-mode no "$@" ;;
  esac
fi
exec "$@"
