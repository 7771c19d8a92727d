package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	clusterNodeCount    = 3
	clusterReadyTimeout = 90 * time.Second // 20 s was too short once under the whole suite's load
	clusterPollPeriod   = 50 * time.Millisecond
	clusterSlotCount    = 16384
)

// clusterNode is one started cluster member and a direct client to it.
type clusterNode struct {
	host, port, busPort string
	client              *redis.Client
}

func (f *fleet) clusterBackend(ctx context.Context) (Backend, error) {
	var addrs []string
	if list := os.Getenv("HOARD_TEST_CLUSTER_ADDRS"); list != "" {
		addrs = splitAddrs(list)
		if len(addrs) == 0 {
			return Backend{}, errors.New("HOARD_TEST_CLUSTER_ADDRS has no addresses")
		}
	} else {
		started, err := f.startCluster(ctx)
		if err != nil {
			return Backend{}, err
		}
		addrs = started
	}

	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	f.trackClient(client)
	if err := verifyCrossKeyScript(ctx, client); err != nil {
		return Backend{}, fmt.Errorf("cluster at %v is not usable: %w", addrs, err)
	}
	return Backend{Name: clusterBackendName, Client: client, URL: strings.Join(addrs, ",")}, nil
}

// startCluster starts three cluster-enabled nodes and joins them into one
// cluster with the slots split evenly, without needing redis-cli. It returns
// the nodes' addresses once every node agrees the cluster is complete.
func (f *fleet) startCluster(ctx context.Context) ([]string, error) {
	nodes := make([]*clusterNode, 0, clusterNodeCount)
	defer func() {
		for _, node := range nodes {
			_ = node.client.Close()
		}
	}()

	for i := range clusterNodeCount {
		var busPort int
		server, err := f.startServer(ctx, "cluster"+strconv.Itoa(i+1), func(dataDir string, freeBusPort int) []string {
			busPort = freeBusPort
			return []string{
				"--cluster-enabled", "yes",
				"--cluster-config-file", dataDir + "/nodes.conf",
				// Generous: no test here is about failure detection, and
				// on a loaded 2-core machine (a full run beside other
				// builds) a node that missed pings for 2 s was marked
				// failed, and every test on the cluster got CLUSTERDOWN.
				"--cluster-node-timeout", "15000",
				// The default bus port is port+10000, which does not exist
				// for ephemeral ports above 55535; pick a free one instead.
				"--cluster-port", strconv.Itoa(busPort),
			}
		})
		if err != nil {
			return nil, fmt.Errorf("start node %d: %w", i+1, err)
		}
		host, port, err := net.SplitHostPort(server.Address())
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, &clusterNode{
			host:    host,
			port:    port,
			busPort: strconv.Itoa(busPort),
			client:  redis.NewClient(&redis.Options{Network: server.Network(), Addr: server.Address()}),
		})
	}

	slotRanges := evenSlotRanges(clusterNodeCount)
	for i, node := range nodes {
		if err := node.client.ClusterAddSlotsRange(ctx, slotRanges[i].Start, slotRanges[i].End).Err(); err != nil {
			return nil, fmt.Errorf("node %d: CLUSTER ADDSLOTSRANGE: %w", i+1, err)
		}
	}
	for i, other := range nodes[1:] {
		// The bus port must be given explicitly: without it Redis assumes port+10000.
		if err := nodes[0].client.Do(ctx, "CLUSTER", "MEET", other.host, other.port, other.busPort).Err(); err != nil {
			return nil, fmt.Errorf("node 1: CLUSTER MEET node %d: %w", i+2, err)
		}
	}
	if err := waitForClusterAgreement(ctx, nodes, slotRanges); err != nil {
		return nil, err
	}

	addrs := make([]string, len(nodes))
	for i, node := range nodes {
		addrs[i] = net.JoinHostPort(node.host, node.port)
	}
	return addrs, nil
}

type slotRange struct{ Start, End int }

// evenSlotRanges splits 0..16383 into n contiguous ranges.
func evenSlotRanges(n int) []slotRange {
	ranges := make([]slotRange, n)
	for i := range n {
		ranges[i] = slotRange{Start: i * clusterSlotCount / n, End: (i+1)*clusterSlotCount/n - 1}
	}
	return ranges
}

// waitForClusterAgreement polls every node until it reports cluster_state:ok
// with all nodes known and its CLUSTER SLOTS shows exactly the expected
// ranges. Checking every node matters: a client that happens to ask a node
// which has not heard of the others yet would see a broken cluster.
func waitForClusterAgreement(ctx context.Context, nodes []*clusterNode, want []slotRange) error {
	ctx, cancel := context.WithTimeout(ctx, clusterReadyTimeout)
	defer cancel()
	ticker := time.NewTicker(clusterPollPeriod)
	defer ticker.Stop()
	for {
		notReady := clusterNotReadyReason(ctx, nodes, want)
		if notReady == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster did not form within %s: %s", clusterReadyTimeout, notReady)
		case <-ticker.C:
		}
	}
}

// clusterNotReadyReason returns "" when every node agrees the cluster is
// complete, else what the first disagreeing node says.
func clusterNotReadyReason(ctx context.Context, nodes []*clusterNode, want []slotRange) string {
	for i, node := range nodes {
		info, err := node.client.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Sprintf("node %d: CLUSTER INFO: %v", i+1, err)
		}
		fields := parseInfo(info)
		if fields["cluster_state"] != "ok" || fields["cluster_known_nodes"] != strconv.Itoa(len(nodes)) {
			return fmt.Sprintf("node %d: cluster_state:%s cluster_known_nodes:%s", i+1, fields["cluster_state"], fields["cluster_known_nodes"])
		}
		slots, err := node.client.ClusterSlots(ctx).Result()
		if err != nil {
			return fmt.Sprintf("node %d: CLUSTER SLOTS: %v", i+1, err)
		}
		got := make([]slotRange, 0, len(slots))
		for _, slot := range slots {
			got = append(got, slotRange{Start: slot.Start, End: slot.End})
		}
		slices.SortFunc(got, func(a, b slotRange) int { return a.Start - b.Start })
		if !slices.Equal(got, want) {
			return fmt.Sprintf("node %d: CLUSTER SLOTS shows %v, want %v", i+1, got, want)
		}
	}
	return ""
}

// parseInfo turns "key:value\r\n" lines into a map.
func parseInfo(info string) map[string]string {
	fields := make(map[string]string)
	for _, line := range strings.Split(info, "\n") {
		if key, value, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[key] = value
		}
	}
	return fields
}

// verifyCrossKeyScript proves the cluster client routes a multi-key script
// to the right node: the exact operation engine tests depend on.
func verifyCrossKeyScript(ctx context.Context, client *redis.ClusterClient) error {
	keys := []string{"{t}:redistest:a", "{t}:redistest:b"}
	const script = `
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[1])
local values = redis.call('MGET', KEYS[1], KEYS[2])
redis.call('DEL', KEYS[1], KEYS[2])
return values`
	values, err := client.Eval(ctx, script, keys, "ok").StringSlice()
	if err != nil {
		return fmt.Errorf("EVAL on %v: %w", keys, err)
	}
	if !slices.Equal(values, []string{"ok", "ok"}) {
		return fmt.Errorf("EVAL on %v returned %v, want [ok ok]", keys, values)
	}
	return nil
}
