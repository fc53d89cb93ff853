package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/metadata"
)

// A broker's life as KRaft's BrokerLifecycleManager runs it: it registers
// with the active controller (a new incarnation id per process, a new
// broker epoch per registration), fenced; heartbeats every
// broker.heartbeat.interval.ms with the offset of the image it acts on; is
// unfenced once that offset reaches its registration; and, on a clean
// stop, asks to shut down and waits until the controller has moved its
// leaderships away.

// register registers this broker and returns its broker epoch; it retries
// until ctx ends.
func (b *Broker) register(ctx context.Context) (int64, error) {
	req := kmsg.NewPtrBrokerRegistrationRequest()
	req.Version = controllerAPIs[req.Key()].max
	req.BrokerID = b.nodeID
	req.ClusterID = b.ClusterID()
	req.IncarnationID = b.incarnation
	for _, l := range b.endpoints() {
		rl := kmsg.NewBrokerRegistrationRequestListener()
		rl.Name, rl.Host, rl.Port = l.Name, l.Host, uint16(l.Port)
		req.Listeners = append(req.Listeners, rl)
	}
	if rack := b.cfg.String("broker.rack"); rack != "" {
		req.Rack = &rack
	}
	req.PreviousBrokerEpoch = b.brokerEpoch.Load()
	for _, f := range metadata.SupportedFeatures {
		rf := kmsg.NewBrokerRegistrationRequestFeature()
		rf.Name, rf.MinSupportedVersion, rf.MaxSupportedVersion = f.Name, f.MinLevel, f.MaxLevel
		req.Features = append(req.Features, rf)
	}
	backoff := 50 * time.Millisecond
	for {
		resp, err := b.ctrl.Request(ctx, req)
		if err == nil {
			r := resp.(*kmsg.BrokerRegistrationResponse)
			if err = kerr.ErrorForCode(r.ErrorCode); err == nil {
				b.brokerEpoch.Store(r.BrokerEpoch)
				return r.BrokerEpoch, nil
			}
			if errors.Is(err, kerr.InconsistentClusterID) {
				return -1, fmt.Errorf("broker: the controllers belong to another cluster than %s", req.ClusterID)
			}
		}
		b.logger.Info("registering with the controller", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("broker: registering with the controller: %w (last error: %v)", context.Cause(ctx), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// endpoints are this broker's registered listeners, the client one first.
func (b *Broker) endpoints() []metadata.Endpoint {
	out := make([]metadata.Endpoint, 0, len(b.listeners))
	for _, bl := range b.listeners {
		a := bl.advertised
		out = append(out, metadata.Endpoint{Name: bl.Name, Host: a.Host, Port: a.Port})
	}
	return out
}

// heartbeat sends one heartbeat. A stale epoch (the controller fenced and
// forgot this registration) registers again.
func (b *Broker) heartbeat(ctx context.Context, wantShutDown bool) (*kmsg.BrokerHeartbeatResponse, error) {
	req := kmsg.NewPtrBrokerHeartbeatRequest()
	req.Version = controllerAPIs[req.Key()].max
	req.BrokerID = b.nodeID
	req.BrokerEpoch = b.brokerEpoch.Load()
	req.CurrentMetadataOffset = -1
	if img := b.image.Load(); img != nil {
		req.CurrentMetadataOffset = img.Offset
	}
	req.WantShutdown = wantShutDown
	if !wantShutDown {
		// A log taken offline by an I/O error (a full or failing disk),
		// or this node's metadata quorum stopped by one, takes the whole
		// log directory, this broker's only one, out of service: the
		// broker asks to be fenced, and the controller moves its
		// leaderships to other in-sync replicas, as Kafka does for a
		// failed log directory. It stays fenced until restarted.
		if err := b.failed(); err != nil {
			req.WantFence = true
			if b.logDirFailed.CompareAndSwap(false, true) {
				b.logger.Error("log directory failed: asking the controller to fence this broker and move its leaderships", "dir", b.dir, "err", err)
			}
		}
	}
	resp, err := b.ctrl.Request(ctx, req)
	if err != nil {
		return nil, err
	}
	r := resp.(*kmsg.BrokerHeartbeatResponse)
	if r.ErrorCode == kerr.StaleBrokerEpoch.Code {
		b.logger.Warn("the controller no longer knows this broker's registration; registering again", "epoch", req.BrokerEpoch)
		if _, err := b.register(ctx); err != nil {
			return nil, err
		}
		return b.heartbeat(ctx, wantShutDown)
	}
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		return nil, err
	}
	if r.IsFenced != b.fenced.Load() {
		b.fenced.Store(r.IsFenced)
		b.logger.Info("broker state", "fenced", r.IsFenced, "caught_up", r.IsCaughtUp, "epoch", req.BrokerEpoch)
	}
	if req.WantFence && r.IsFenced {
		// Fenced, its leaderships moved: the node stops, as Kafka halts
		// when its last log directory fails, rather than serve clients
		// from metadata it may no longer follow.
		b.failOnce.Do(func() { close(b.failedCh) })
	}
	return r, nil
}

// joinCluster registers this broker and heartbeats until it is unfenced.
func (b *Broker) joinCluster(ctx context.Context) error {
	b.fenced.Store(true)
	if _, err := b.register(ctx); err != nil {
		return err
	}
	for {
		r, err := b.heartbeat(ctx, false)
		if err == nil && !r.IsFenced {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("broker: waiting to be unfenced: %w (last error: %v)", context.Cause(ctx), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// runHeartbeats heartbeats until ctx ends.
func (b *Broker) runHeartbeats(ctx context.Context) {
	interval := time.Duration(b.cfg.Int("broker.heartbeat.interval.ms")) * time.Millisecond
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		hctx, cancel := context.WithTimeout(ctx, interval)
		if _, err := b.heartbeat(hctx, false); err != nil && ctx.Err() == nil {
			b.logger.Warn("heartbeat to the controller", "err", err)
		}
		cancel()
	}
}

// controlledShutdown asks the controller to move this broker's leaderships
// away and returns once it says the broker may stop, or ctx ends.
func (b *Broker) controlledShutdown(ctx context.Context) {
	start := time.Now()
	for {
		r, err := b.heartbeat(ctx, true)
		if err == nil && r.ShouldShutdown {
			b.logger.Info("controlled shutdown: leaderships moved", "duration", time.Since(start).Round(time.Millisecond))
			return
		}
		select {
		case <-ctx.Done():
			b.logger.Warn("controlled shutdown did not finish; stopping anyway", "err", err)
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}
