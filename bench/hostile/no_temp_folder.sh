#!/bin/sh
# run "$@" with no writable temp folder: /tmp and /var/tmp read-only, cwd read-only, TMPDIR unset
mount -t tmpfs -o ro tmpfs /tmp && mount -t tmpfs -o ro tmpfs /var/tmp && cd /proc && unset TMPDIR TEMP TMP && exec "$@"
