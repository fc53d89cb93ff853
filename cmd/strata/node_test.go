package main

import "github.com/strata-io/strata"

// startNode starts a real, durable Strata node on dir and a free loopback
// port. The first member of a group is not held back for other members
// (group.initial.rebalance.delay.ms=0, as Kafka's own test configs do):
// each `topic consume --group` would otherwise wait 3 s to join.
func startNode(dir string) (addr, clusterID string, stop func(), err error) {
	n, err := strata.Start(strata.Options{
		Dir:      dir,
		Settings: map[string]string{"group.initial.rebalance.delay.ms": "0"},
	})
	if err != nil {
		return "", "", nil, err
	}
	return n.Addr(), n.ClusterID(), func() { _ = n.Close() }, nil
}
