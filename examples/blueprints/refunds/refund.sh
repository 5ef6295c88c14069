#!/bin/sh
# A command tool: JSON arguments on stdin, a JSON result on stdout; lines
# on stderr show up as `tool_delta` events.
read -r args
echo "refunding $args" >&2
echo '{"refunded": true, "amount": 20}'
