// Package strata embeds a Strata node in a Go program: a durable, real
// Kafka-protocol broker (not a fake), for tests and for programs that want
// their own log. A node started here is the same code `strata serve` runs.
//
//	node, err := strata.Start(strata.Options{Dir: t.TempDir()})
//	...
//	cl, err := kgo.NewClient(kgo.SeedBrokers(node.Addr()))
//
// StartCluster runs a replicated cluster of such nodes in the process, with
// faults to inject (Kill, Partition, FailDisk) and Restart:
//
//	c, err := strata.StartCluster(strata.ClusterOptions{Nodes: 3, Dir: t.TempDir()})
//	...
//	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
package strata

import (
	"fmt"
	"log/slog"
	"os"
	"sort"

	"github.com/strata-io/strata/internal/broker"
	"github.com/strata-io/strata/internal/config"
)

// Options configure a node.
type Options struct {
	// Dir is the data directory (log.dirs). Required.
	Dir string
	// Listen is the client listener's host:port; "127.0.0.1:0" (a free
	// port) when empty.
	Listen string
	// Settings are server properties with Kafka's names, applied after
	// Dir and Listen (num.partitions, log.segment.bytes, ...).
	Settings map[string]string
	// Logger receives the node's logs; discarded when nil.
	Logger *slog.Logger
}

// Node is a running Strata node.
type Node struct {
	b *broker.Broker
}

// Start opens (recovering if needed) the data directory and starts serving.
func Start(opts Options) (*Node, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("strata: Options.Dir is required")
	}
	listen := opts.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	sets := []string{"log.dirs=" + opts.Dir, "listeners=PLAINTEXT://" + listen, "strata.admin.listener="}
	keys := make([]string, 0, len(opts.Settings))
	for k := range opts.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		sets = append(sets, k+"="+opts.Settings[k])
	}
	cfg, err := config.Load(config.LoadOptions{Sets: sets})
	if err != nil {
		return nil, err
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("strata: %w", err)
	}
	b, err := broker.New(broker.Options{Config: cfg, Logger: logger})
	if err != nil {
		return nil, err
	}
	if err := b.Start(); err != nil {
		b.Close()
		return nil, err
	}
	return &Node{b: b}, nil
}

// Addr is the address Kafka clients connect to.
func (n *Node) Addr() string { return n.b.Addr() }

// ClusterID is the cluster's id.
func (n *Node) ClusterID() string { return n.b.ClusterID() }

// Close shuts the node down cleanly: requests under way finish, logs are
// flushed and checkpointed, and the next start skips recovery.
func (n *Node) Close() error { return n.b.Close() }
