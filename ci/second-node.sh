#!/usr/bin/env bash
# ci/second-node.sh up|down|status|wall on|off — a second node for the local Kubernetes
# cluster (`fencecheck cluster up`) that is NOT the harness's network: the test
# bed for running the kubernetes backend's pods on nodes other than its own
# (docs/kubernetes.md, "Not built yet"). `harness/tests/full/k8s_backend.rs` brings
# it up on its own cluster to check the backend's refusal of such a node.
#
# The node is this kernel, but everything a remote node differs in for the
# backend is its own:
# - a network namespace (`fcn2`) joined to this machine by a veth pair
#   (this side 10.251.0.1, the node 10.251.0.2): a pod on the host's network
#   listens on the node's addresses, and this machine's loopback is not its;
# - a Docker engine of its own (its own data root, socket, containerd): it has
#   none of this machine's images; the pause image is loaded into it, every
#   other image has to come from a registry (`[cluster] registry`): the node's
#   127.0.0.1:5000 (FENCECHECK_NODE2_REGISTRY_PORT) is carried to this
#   machine's 10.251.0.1:5000, so a registry listening here on 0.0.0.0:5000 is
#   `127.0.0.1:5000` to both engines, plain HTTP on loopback for each;
# - a mount namespace of its own for its engine and kubelet, where
#   /var/log/pods is its own (two kubelets on one filesystem delete each
#   other's pod logs);
# - kubelet 1.20.2 (the local cluster's build) in that namespace, registered as
#   node `10.251.0.2`: named by its address, so the apiserver reaches it for
#   logs and exec without DNS (it dials the Hostname address first).
# The apiserver listens on loopback, so a small forwarder carries
# 10.251.0.1:<port> to it; the node's kubeconfig names the certificate's
# 127.0.0.1 as the TLS server name.
# - a pod network (its engine's bridge, 10.252.0.0/24, masqueraded) and
#   kube-proxy 1.20.2 (built by ci/kubernetes.sh), which carries the
#   `kubernetes` Service's address to that forwarder: `up` publishes it as the
#   Service's Endpoints and EndpointSlice (the local API server keeps none, its
#   own address being loopback), so a pod there reaches the API server as in any
#   cluster (the kubernetes backend's reaper with `[cluster] reaper = "in-cluster"`).
#
# Why not kind or k3s: neither is reachable from here. Why not a kubelet in a
# container: the same, with more to build (a Docker engine inside it).
# Tried on this machine (Docker 20.10, cgroup v1): the node is Ready in about
# 20 s; a pod with `nodeName: 10.251.0.2`, `hostNetwork: true` and an image
# loaded into its engine runs and answers on 10.251.0.2 (not on 127.0.0.1),
# and its log comes through the API.
#
# `down` removes everything `up` made (the node object too); `up` twice is
# refused. Must run as root (network namespaces, a Docker engine).
set -euo pipefail

CACHE=${FENCECHECK_CACHE:-$HOME/.cache/fencecheck}
CLUSTER=${FENCECHECK_CLUSTER_DIR:-$CACHE/cluster}
STATE=$CACHE/node2
NETNS=fcn2
HOST_IP=10.251.0.1
NODE_IP=10.251.0.2
# kubelet's port on the node: the only one this machine opens connections to when walled.
KUBELET_PORT=32250
NODE=$NODE_IP
KUBELET=$CACHE/kubernetes/bin/kubelet
PROXY=$CACHE/kubernetes/bin/kube-proxy
# The node's pod network (its engine's bridge), for pods not on the host's network.
POD_NET=10.252.0.1/24
REGISTRY_PORT=${FENCECHECK_NODE2_REGISTRY_PORT:-5000}
D2="docker -H unix://$STATE/docker.sock"

die() { echo "second-node: $*" >&2; exit 2; }

api() { # METHOD PATH [curl args...]
	local m=$1 p=$2
	shift 2
	curl -sk -m 10 -X "$m" -H "Authorization: Bearer $TOKEN" "$SERVER$p" "$@"
}

cluster_facts() {
	[ -f "$CLUSTER/kubeconfig" ] || die "no local cluster ($CLUSTER/kubeconfig missing): run \`fencecheck cluster up\` first"
	SERVER=$(awk '/server:/ {print $2; exit}' "$CLUSTER/kubeconfig")
	TOKEN=$(awk '/token:/ {print $2; exit}' "$CLUSTER/kubeconfig")
	PORT=${SERVER##*:}
}

# Waits until `cmd` succeeds, at most `secs` seconds; says `what` if it never does.
wait_for() {
	local secs=$1 what=$2
	shift 2
	local end=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		[ $SECONDS -lt $end ] || die "$what not within ${secs}s (see $STATE/*.log)"
		sleep 0.5
	done
}

node_ready() {
	api GET "/api/v1/nodes/$NODE" | python3 -c '
import json, sys
n = json.load(sys.stdin)
ok = any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
sys.exit(0 if ok else 1)'
}

# kube-proxy has put the `kubernetes` Service's address into the node's NAT table.
service_routed() {
	ip netns exec $NETNS iptables -t nat -S KUBE-SERVICES 2>/dev/null | grep -q -- "-d $SERVICE_IP/32"
}

up() {
	[ "$(id -u)" = 0 ] || die "must run as root (a network namespace, a Docker engine)"
	[ -x "$KUBELET" ] || die "kubelet is not built ($KUBELET): run ci/bootstrap.sh --system kubernetes"
	[ -x "$PROXY" ] || die "kube-proxy is not built ($PROXY): run ci/bootstrap.sh --system kubernetes"
	cluster_facts
	[ ! -e "$STATE" ] || die "already up ($STATE exists): ci/second-node.sh down first"
	local pause
	pause=$(docker images 'fencecheck/pause' --format '{{.Repository}}:{{.Tag}}' | head -n1)
	[ -n "$pause" ] || die "no fencecheck/pause image on this machine's engine: run \`fencecheck cluster up\`"
	mkdir -p "$STATE/kubelet/pki"

	ip netns add $NETNS
	ip link add $NETNS-h type veth peer name $NETNS-n
	ip link set $NETNS-n netns $NETNS
	ip addr add $HOST_IP/24 dev $NETNS-h
	ip link set $NETNS-h up
	ip netns exec $NETNS ip addr add $NODE_IP/24 dev $NETNS-n
	ip netns exec $NETNS ip link set $NETNS-n up
	ip netns exec $NETNS ip link set lo up
	ip netns exec $NETNS ip route add default via $HOST_IP

	# nsenter, not `ip netns exec`: that one remounts /sys, and the engine then
	# finds no cgroup mounts. An empty config file: this machine's daemon.json
	# names its own data root and storage driver.
	echo '{}' >"$STATE/daemon.json"
	# Each kubelet's garbage collection deletes the /var/log/pods directories of
	# the pods it does not know (kubelet 1.20's evictPodLogsDirectories), a fixed
	# path: two kubelets on one filesystem delete each other's pod logs within a
	# minute, and a log stream of the API then fails ("failed to try resolving
	# symlinks in path /var/log/pods/..."). So the node's engine and kubelet share
	# a mount namespace of their own in which /var/log/pods and /var/log/containers
	# are the node's. Slave: this machine's mounts still reach it; its own
	# (kubelet's Secret and ConfigMap volumes) stay in it, where the node's engine
	# sees them. It goes when they do and `down` unmounts its file.
	mkdir -p "$STATE/ns" "$STATE/log/pods" "$STATE/log/containers" /var/log/pods /var/log/containers
	mount --bind "$STATE/ns" "$STATE/ns"
	mount --make-private "$STATE/ns"
	touch "$STATE/ns/mnt"
	unshare --mount="$STATE/ns/mnt" --propagation slave true
	nsenter --mount="$STATE/ns/mnt" mount --bind "$STATE/log/pods" /var/log/pods
	nsenter --mount="$STATE/ns/mnt" mount --bind "$STATE/log/containers" /var/log/containers
	nohup nsenter --net=/var/run/netns/$NETNS --mount="$STATE/ns/mnt" dockerd --config-file "$STATE/daemon.json" \
		--data-root "$STATE/docker" --exec-root "$STATE/exec" --pidfile "$STATE/dockerd.pid" \
		-H "unix://$STATE/docker.sock" --bip=$POD_NET --storage-driver=vfs --cgroup-parent=/$NETNS \
		--insecure-registry=10.251.0.0/24 >"$STATE/dockerd.log" 2>&1 &
	wait_for 60 "the node's Docker engine" $D2 version
	docker save "$pause" | $D2 load >/dev/null

	cat >"$STATE/forward.py" <<'EOF'
import socket, sys, threading
lh, lp, th, tp = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def pipe(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    finally:
        try:
            b.shutdown(socket.SHUT_WR)
        except OSError:
            pass
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((lh, lp))
s.listen(64)
while True:
    c, _ = s.accept()
    try:
        u = socket.create_connection((th, tp))
    except OSError:
        c.close()
        continue
    threading.Thread(target=pipe, args=(c, u), daemon=True).start()
    threading.Thread(target=pipe, args=(u, c), daemon=True).start()
EOF
	nohup python3 "$STATE/forward.py" $HOST_IP "$PORT" 127.0.0.1 "$PORT" >"$STATE/forward.log" 2>&1 &
	echo $! >"$STATE/forward.pid"
	# The node's loopback registry port, carried to this machine's: a registry
	# listening here on 0.0.0.0:$REGISTRY_PORT is `127.0.0.1:$REGISTRY_PORT` to both
	# engines, which push and pull plain HTTP on loopback without configuration.
	nohup nsenter --net=/var/run/netns/$NETNS python3 "$STATE/forward.py" 127.0.0.1 \
		"$REGISTRY_PORT" $HOST_IP "$REGISTRY_PORT" >"$STATE/forward-registry.log" 2>&1 &
	echo $! >"$STATE/forward-registry.pid"

	sed "s|server: .*|server: https://$HOST_IP:$PORT\n    tls-server-name: 127.0.0.1|" \
		"$CLUSTER/kubeconfig" >"$STATE/kubeconfig"
	cp "$CLUSTER/kubelet/client-ca.crt" "$STATE/kubelet/"
	local k=$STATE/kubelet
	nohup nsenter --net=/var/run/netns/$NETNS --mount="$STATE/ns/mnt" "$KUBELET" \
		--kubeconfig="$STATE/kubeconfig" --root-dir="$k" --cert-dir="$k/pki" \
		--hostname-override=$NODE --node-ip=$NODE_IP \
		--container-runtime=docker --docker-endpoint="unix://$STATE/docker.sock" \
		--container-runtime-endpoint="unix://$k/dockershim.sock" \
		--experimental-dockershim-root-directory="$k/dockershim" \
		--volume-plugin-dir="$k/volume-plugins" --feature-gates=DevicePlugins=false \
		--pod-infra-container-image="$pause" --cgroup-driver=cgroupfs --fail-swap-on=false \
		--cgroups-per-qos=false --enforce-node-allocatable= --eviction-hard= \
		--image-gc-high-threshold=100 --address=$NODE_IP --port=$KUBELET_PORT --healthz-port=32248 \
		--read-only-port=0 --anonymous-auth=false --client-ca-file="$k/client-ca.crt" \
		--authentication-token-webhook=false --authorization-mode=AlwaysAllow \
		>"$STATE/kubelet.log" 2>&1 &
	echo $! >"$STATE/kubelet.pid"
	wait_for 120 "node $NODE Ready" node_ready

	# A pod not on the host's network reaches the API server as in any cluster:
	# at the `kubernetes` Service's address, which kube-proxy carries to the
	# Service's Endpoints. The local cluster's API server advertises loopback
	# and keeps no Endpoints (`--endpoint-reconciler-type=none`): the route a
	# pod here can take is the forwarder above, so that is what they say.
	# Pods get the Service's address from kubelet (KUBERNETES_SERVICE_HOST).
	api DELETE /api/v1/namespaces/default/endpoints/kubernetes -o /dev/null || true
	api POST /api/v1/namespaces/default/endpoints -o /dev/null -f -H 'Content-Type: application/json' \
		-d "{\"metadata\":{\"name\":\"kubernetes\"},\"subsets\":[{\"addresses\":[{\"ip\":\"$HOST_IP\"}],\"ports\":[{\"name\":\"https\",\"port\":$PORT,\"protocol\":\"TCP\"}]}]}" ||
		die "could not create Endpoints default/kubernetes"
	# kube-proxy 1.20 reads EndpointSlices, which the API server's reconciler
	# keeps beside the Endpoints: the same, as a slice.
	api DELETE /apis/discovery.k8s.io/v1beta1/namespaces/default/endpointslices/kubernetes -o /dev/null || true
	api POST /apis/discovery.k8s.io/v1beta1/namespaces/default/endpointslices -o /dev/null -f \
		-H 'Content-Type: application/json' \
		-d "{\"metadata\":{\"name\":\"kubernetes\",\"labels\":{\"kubernetes.io/service-name\":\"kubernetes\"}},\"addressType\":\"IPv4\",\"endpoints\":[{\"addresses\":[\"$HOST_IP\"],\"conditions\":{\"ready\":true}}],\"ports\":[{\"name\":\"https\",\"port\":$PORT,\"protocol\":\"TCP\"}]}" ||
		die "could not create EndpointSlice default/kubernetes"
	SERVICE_IP=$(api GET /api/v1/namespaces/default/services/kubernetes |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["spec"]["clusterIP"])') ||
		die "the cluster has no Service default/kubernetes"
	# conntrack and OOM flags 0: leave the kernel's values (the second is the
	# capability this machine lacks, as for kubelet's sandbox).
	nohup nsenter --net=/var/run/netns/$NETNS --mount="$STATE/ns/mnt" "$PROXY" \
		--kubeconfig="$STATE/kubeconfig" --hostname-override=$NODE --proxy-mode=iptables \
		--conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 \
		--conntrack-tcp-timeout-close-wait=0 --oom-score-adj=0 \
		--metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256 \
		>"$STATE/kube-proxy.log" 2>&1 &
	echo $! >"$STATE/kube-proxy.pid"
	wait_for 60 "kube-proxy's rule for the kubernetes Service ($SERVICE_IP)" service_routed
	echo "node $NODE Ready (its engine: $D2; its 127.0.0.1:$REGISTRY_PORT is this machine's $HOST_IP:$REGISTRY_PORT)"
}

stop_pid() { # file
	[ -f "$1" ] || return 0
	local pid
	pid=$(cat "$1")
	kill "$pid" 2>/dev/null || return 0
	for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.25; done
	kill -9 "$pid" 2>/dev/null || true
}

down() {
	cluster_facts || true
	stop_pid "$STATE/kube-proxy.pid"
	stop_pid "$STATE/kubelet.pid"
	if [ -S "$STATE/docker.sock" ]; then
		$D2 ps -aq | xargs -r $D2 rm -f >/dev/null 2>&1 || true
	fi
	stop_pid "$STATE/dockerd.pid"
	stop_pid "$STATE/forward.pid"
	stop_pid "$STATE/forward-registry.pid"
	[ -z "${TOKEN:-}" ] || api DELETE "/api/v1/nodes/$NODE" -o /dev/null || true
	# The Endpoints `up` made lead to the forwarder that goes with the node.
	[ -z "${TOKEN:-}" ] || api DELETE /api/v1/namespaces/default/endpoints/kubernetes -o /dev/null || true
	[ -z "${TOKEN:-}" ] ||
		api DELETE /apis/discovery.k8s.io/v1beta1/namespaces/default/endpointslices/kubernetes -o /dev/null || true
	# The engine's and kubelet's own mounts under the state directory, deepest first.
	if [ -d "$STATE" ]; then
		findmnt -rn -o TARGET | grep "^$STATE" | sort -r | xargs -r -n1 umount -l || true
	fi
	ip netns del $NETNS 2>/dev/null || true
	ip link del $NETNS-h 2>/dev/null || true
	rm -rf "$STATE"
	echo "second node down"
}

# `wall on`: the node may open connections to this machine only at the API
# server's forwarder and the registry, as a node in a cloud reaches its
# control plane and its registry but not the laptop the harness runs on. And
# this machine may open connections to the node only at kubelet's port, as to
# a cloud's node that only its control plane reaches: the harness then reaches
# the run's pods there through the API server (port-forwards). Replies to
# allowed connections pass. Each direction's refusals are counted by its own
# rule (FC-WALL: the node's, FC-WALL-IN: this machine's).
# `wall off` takes the rules out again (`down` goes with the namespace).
wall() {
	cluster_facts
	ip netns exec $NETNS iptables -D OUTPUT -j FC-WALL 2>/dev/null || true
	ip netns exec $NETNS iptables -D FORWARD -j FC-WALL 2>/dev/null || true
	ip netns exec $NETNS iptables -D INPUT -j FC-WALL-IN 2>/dev/null || true
	for chain in FC-WALL FC-WALL-IN; do
		ip netns exec $NETNS iptables -F $chain 2>/dev/null || true
		ip netns exec $NETNS iptables -X $chain 2>/dev/null || true
	done
	case "${1:-}" in
	on)
		ip netns exec $NETNS iptables -N FC-WALL
		ip netns exec $NETNS iptables -A FC-WALL -d $HOST_IP -p tcp -m conntrack --ctstate NEW \
			-m multiport ! --dports "$PORT,$REGISTRY_PORT" -j REJECT --reject-with tcp-reset
		ip netns exec $NETNS iptables -I OUTPUT 1 -j FC-WALL
		# The node's pods on its pod network too (theirs is forwarded traffic).
		ip netns exec $NETNS iptables -I FORWARD 1 -j FC-WALL
		ip netns exec $NETNS iptables -N FC-WALL-IN
		ip netns exec $NETNS iptables -A FC-WALL-IN -s $HOST_IP -p tcp -m conntrack --ctstate NEW \
			! --dport $KUBELET_PORT -j REJECT --reject-with tcp-reset
		ip netns exec $NETNS iptables -I INPUT 1 -j FC-WALL-IN
		echo "node $NODE reaches this machine only at $HOST_IP:$PORT (the API server) and :$REGISTRY_PORT (the registry);" \
			"this machine reaches it only at $NODE_IP:$KUBELET_PORT (kubelet)"
		;;
	off) echo "node $NODE and this machine reach each other again" ;;
	*) die "usage: ci/second-node.sh wall on|off" ;;
	esac
}

status() {
	cluster_facts
	if [ -d "$STATE" ] && node_ready; then echo "node $NODE Ready"; else echo "node $NODE not up"; exit 1; fi
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
wall) wall "${2:-}" ;;
*) die "usage: ci/second-node.sh up|down|status|wall on|off" ;;
esac
