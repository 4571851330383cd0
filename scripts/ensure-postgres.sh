#!/usr/bin/env bash
# Makes sure the machine's PostgreSQL answers on 127.0.0.1:5432 (it is started before sessions
# and CI; this starts it again if it stopped). Bounded: gives up after 30 s.
set -euo pipefail
ready() { pg_isready -q -h 127.0.0.1 -p 5432; }
if ready; then echo "postgres is up"; exit 0; fi
echo "starting postgres"
pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
for _ in $(seq 1 30); do
  if ready; then echo "postgres is up"; exit 0; fi
  sleep 1
done
echo "postgres did not come up on 127.0.0.1:5432" >&2
exit 1
