package broker

import (
	"context"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/replica"
)

// fetcherConfig is what this broker's replica fetchers use, from its
// replica.fetch.* keys.
func (b *Broker) fetcherConfig() replica.FetcherConfig {
	ms := func(key string) time.Duration { return time.Duration(b.cfg.Int(key)) * time.Millisecond }
	return replica.FetcherConfig{
		ReplicaID:        b.nodeID,
		MaxBytes:         int32(b.cfg.Int("replica.fetch.max.bytes")),
		MinBytes:         int32(b.cfg.Int("replica.fetch.min.bytes")),
		MaxWait:          ms("replica.fetch.wait.max.ms"),
		ResponseMaxBytes: int32(b.cfg.Int("replica.fetch.response.max.bytes")),
		Backoff:          ms("replica.fetch.backoff.ms"),
		Timeout:          ms("replica.socket.timeout.ms"),
		Quota:            b.followerQuota,
		Logger:           b.logger,
	}
}

// leaderClient sends a replica fetcher's requests to its source broker
// over the Kafka protocol, at the versions both support.
type leaderClient struct{ cl *kgo.Client }

// dialLeader returns a client for the broker at addr, as node nodeID,
// connecting with dial; opts add the inter-broker listener's security
// (TLS, SASL).
func dialLeader(addr string, nodeID int32, dial func(ctx context.Context, network, addr string) (net.Conn, error), opts ...kgo.Opt) (leaderClient, error) {
	opts = append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.ClientID("strata-replica-fetcher-" + itoa(nodeID))}, opts...)
	if dial != nil {
		opts = append(opts, kgo.Dialer(dial))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return leaderClient{}, err
	}
	return leaderClient{cl}, nil
}

// Request implements replica.Client: straight to the seed broker, with no
// routing by partition leader.
func (c leaderClient) Request(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	return c.cl.SeedBrokers()[0].Request(ctx, req)
}

// Close closes the connection.
func (c leaderClient) Close() { c.cl.Close() }
