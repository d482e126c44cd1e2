# A stand-in for torchrun on a fleet host: reports its rank as torchrun's --tee does with
# ddptui's prefix template, then holds (one process, no children) until it is killed.
# The rank is the node's index from DDPTUI_TAG (<run id>.<index>) under ddptui, or from the
# host's name (nodeN is rank N-1) when started by pdsh or clush.
if [ -n "$DDPTUI_TAG" ]; then rank=${DDPTUI_TAG##*.}; else rank=$(( ${HOSTNAME#node} - 1 )); fi
echo "[ddptui:$rank:0]:fleet stand-in ready host=$HOSTNAME"
exec -a ddptui-fleet-standin sleep 86400
