package main

import "github.com/strata-io/strata"

// startNode starts a real, durable Strata node on dir and a free loopback
// port.
func startNode(dir string) (addr, clusterID string, stop func(), err error) {
	n, err := strata.Start(strata.Options{Dir: dir})
	if err != nil {
		return "", "", nil, err
	}
	return n.Addr(), n.ClusterID(), func() { _ = n.Close() }, nil
}
