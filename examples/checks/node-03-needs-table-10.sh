#!/bin/sh
# A demo health check for `sluice dev --check-cmd`: node-03 loses connectivity
# when its mgmt routing table is anything but 10. Every other node and config
# passes. The agent runs it after each apply with SLUICE_NODE and SLUICE_CONFIG
# (the applied config as JSON) in its environment; exit 0 means healthy.
if [ "$SLUICE_NODE" = node-03 ] && grep -q '"tableId": *1[1-9]' "$SLUICE_CONFIG"; then
	echo "ping 10.0.0.1 via mgmt: 100% packet loss"
	exit 1
fi
exit 0
