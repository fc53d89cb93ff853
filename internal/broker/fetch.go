package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/quota"
	"github.com/strata-io/strata/internal/replica"
	"github.com/strata-io/strata/internal/wire"
)

// Fetch: v4-16.
//
// Behavior:
// * Records go from the page cache to the socket with sendfile(2): each
// partition's records are a file region of whole batches, spliced into the
// encoded response by wire (strata.fetch.zero.copy=false copies instead).
// * Consumers read up to the high watermark, or with isolation level
// read_committed (1) up to the last stable offset, and then get the
// aborted transactions (from the .txnindex) that may have records in what
// they read, as Kafka answers; the client drops those records and the
// control batches.
// * MinBytes/MaxWaitMillis long-poll: the response waits, deferred, until
// enough bytes are committed on any fetched partition or the wait ends.
// As Kafka's DelayedFetch, what counts is what could be read at once, not
// what this response carries: a partition whose read stopped at its
// PartitionMaxBytes counts that much, and a fetch of a segment older than
// the one the high watermark (or log end) is in is answered at once, so a
// reader whose MinBytes equals its MaxBytes does not wait out MaxWait
// for each small batch of an older (or compacted) segment.
// * Incremental fetch sessions (KIP-227, fetchsession.go): after the first
// request, requests name only changed partitions and responses carry only
// partitions with news. A full session cache declines new sessions
// (session id 0); the client then fetches in full.
// * Per-partition and per-response max bytes are honoured, with KIP-74's
// rule that the first partition with data returns at least one batch.
// * Follower fetches (replica id >= 0, ReplicaState v15+) read up to the
// log end offset, record the follower's position with the partition
// (which may move the high watermark and the ISR), and answer
// DivergingEpoch (v12+) when the follower's last fetched epoch shows its
// log diverged; their bytes are not counted as BytesOut, as in Kafka. A
// follower long-polls for the log end offset to move.
// * NOT_LEADER_OR_FOLLOWER carries the current leader (v12+) and its
// endpoint (v16+, KIP-951).
// * Replication throttles: records of a partition the topic's
// leader.replication.throttled.replicas names for this broker, read for a
// follower outside the ISR, are held back while
// leader.replication.throttled.rate is exceeded.
// * Fetch from followers (KIP-392, v11+): a consumer's fetch may be served
// by a follower, up to the high watermark the follower knows (an offset
// past it and within its log reads nothing; past its log end is
// OFFSET_OUT_OF_RANGE). With replica.selector.class the rack-aware
// selector, a leader answers a consumer whose rack (client.rack) has a
// follower in the ISR holding the fetch offset, and not the leader, with
// that follower as PreferredReadReplica and no records.
func init() {
	register(api{key: kmsg.Fetch, min: 4, max: 16, handle: (*Broker).handleFetch,
		authorize: authorizeFetch, errors: fetchErrors, quota: fetchQuota})
}

// fetchQuota: the records a consumer's fetch returns count against
// consumer_byte_rate; a follower's fetch is a broker's request.
var fetchQuota = &quotaRule{bytes: quota.ConsumerByteRate, exempt: func(req kmsg.Request) exemption {
	if r := req.(*kmsg.FetchRequest); r.ReplicaID >= 0 || r.ReplicaState.ID >= 0 {
		return interBroker
	}
	return counted
}}

func (b *Broker) handleFetch(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.FetchRequest)
	// Resolve the session (KIP-227): fr is the full fetch to run.
	var session *fetchSession
	full := true
	switch {
	case r.SessionEpoch == -1: // a full fetch outside any session
		if r.SessionID != 0 {
			b.fetchSessions.remove(r.SessionID)
		}
	case r.SessionEpoch == 0: // a full fetch that starts a session
		if r.SessionID != 0 {
			b.fetchSessions.remove(r.SessionID)
		}
		if session = b.fetchSessions.create(b.now(), r.Version); session != nil {
			session.mu.Lock()
			session.update(r)
		}
	case r.SessionID == 0:
		return respond(sessionError(r, kerr.InvalidFetchSessionEpoch))
	default: // an incremental fetch
		if session = b.fetchSessions.get(r.SessionID, b.now()); session == nil {
			return respond(sessionError(r, kerr.FetchSessionIDNotFound))
		}
		session.mu.Lock()
		if r.SessionEpoch != session.epoch || r.Version != session.version {
			session.mu.Unlock()
			return respond(sessionError(r, kerr.InvalidFetchSessionEpoch))
		}
		session.nextEpoch()
		session.update(r)
		full = false
	}
	fr := r
	if session != nil {
		fr = session.request(r)
	}
	// finish answers one pass and releases the session.
	finish := func(res fetchResult) wire.Response {
		if session != nil {
			session.trim(res.response.Body.(*kmsg.FetchResponse), full)
			session.mu.Unlock()
		}
		return b.countFetch(res)
	}

	res := b.fetchOnce(fr, false)
	if res.done(fr) {
		return finish(res)
	}
	wait := time.Duration(r.MaxWaitMillis) * time.Millisecond
	return wire.Response{Deferred: func() wire.Response {
		wake := make(chan struct{}, 1)
		timer := time.NewTimer(wait)
		defer timer.Stop()
		parts := res.parts
		defer func() {
			for _, p := range parts {
				p.Unwatch(wake)
			}
		}()
		for {
			for _, p := range parts {
				p.Watch(wake)
			}
			// Read again if data arrived before the watch: any high
			// watermark that moved since the last pass.
			if res.moved() {
				res = b.fetchOnce(fr, true)
				if res.done(fr) {
					return finish(res)
				}
			}
			select {
			case <-wake:
			case <-timer.C:
				return finish(res)
			case <-ctx.Done():
				return finish(res)
			case <-b.stopping.Done():
				return finish(res)
			}
		}
	}}
}

// fetchResult is one pass over a fetch request's partitions.
type fetchResult struct {
	response wire.Response
	// ready is what the partitions could give at once, Kafka's
	// DelayedFetch accumulated size: each partition's bytes read, or its
	// PartitionMaxBytes when more follow in its segment (storage's More).
	ready int64
	// olderSegment is set when a partition's read lies in an older
	// segment than the one its limit is in (LaterSegment): more is
	// there at once.
	olderSegment bool
	errors       bool
	parts        []*replica.Partition // the partitions read, to watch
	limits       []int64              // what bounded their reads (replica.ReadResult.Limit)
	// replicaID is the fetching follower, or -1 for a consumer.
	replicaID int32
	// anyReplica is set for a consumer that may read from a follower
	// (v11+); redirected when a partition named a preferred read replica,
	// which is answered at once, as Kafka does.
	anyReplica, redirected bool
	// readCommitted is a consumer's isolation level read_committed.
	readCommitted bool
	// bytesOut and failed count per topic, for the metrics of the pass
	// that is answered.
	bytesOut map[string]int64
	failed   map[string]int
}

// moved reports whether any partition has news since the pass read it.
func (f *fetchResult) moved() bool {
	for i, p := range f.parts {
		if p.Limit(f.replicaID >= 0, f.anyReplica, f.readCommitted) != f.limits[i] {
			return true
		}
	}
	return false
}

// countFetch records the metrics of the answered pass and returns its
// response.
func (b *Broker) countFetch(res fetchResult) wire.Response {
	for topic, n := range res.bytesOut {
		b.metrics.BytesOut.WithLabelValues(topic).Add(float64(n))
	}
	for topic, n := range res.failed {
		b.metrics.FailedFetchRequests.WithLabelValues(topic).Add(float64(n))
	}
	return res.response
}

// done reports whether the response can go now.
func (f *fetchResult) done(r *kmsg.FetchRequest) bool {
	return r.MaxWaitMillis <= 0 || f.ready >= int64(r.MinBytes) || f.olderSegment || f.errors || f.redirected || len(f.parts) == 0
}

// fetchOnce reads every requested partition once; reread is set for a
// long poll's later passes.
func (b *Broker) fetchOnce(r *kmsg.FetchRequest, reread bool) fetchResult {
	resp := r.ResponseKind().(*kmsg.FetchResponse)
	img := b.image.Load()
	res := fetchResult{replicaID: fetchReplicaID(r)}
	res.anyReplica = res.replicaID < 0 && r.Version >= 11
	res.readCommitted = res.replicaID < 0 && r.IsolationLevel == 1
	st := b.settings.Load()
	rackAware := res.anyReplica && st.rackAwareReads && r.Rack != ""
	limit := st.fetchMaxBytes
	if res.replicaID >= 0 {
		limit = st.replicaFetchResponseMaxBytes
	}
	remaining := int64(r.MaxBytes)
	if remaining <= 0 || remaining > limit {
		remaining = limit
	}
	var leaders leaderHints
	minOneBatch := true
	resp.Topics = make([]kmsg.FetchResponseTopic, len(r.Topics))
	for i := range r.Topics {
		rt := &r.Topics[i]
		st := &resp.Topics[i]
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		name, topicErr := fetchTopicName(img, r.Version, rt)
		st.Partitions = make([]kmsg.FetchResponseTopicPartition, len(rt.Partitions))
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			sp := &st.Partitions[j]
			*sp = kmsg.NewFetchResponseTopicPartition()
			sp.Partition = rp.Partition
			// Empty, not null: librdkafka rejects a null record set.
			sp.RecordBatches = []byte{}
			err := topicErr
			var p *replica.Partition
			if err == nil {
				p, err = b.hostedPartition(img, name, rp.Partition)
			}
			if err == nil && rackAware {
				var redirected bool
				if redirected, err = b.preferReadReplica(img, p, r.Rack, rp, sp); redirected {
					res.redirected = true
					continue
				}
			}
			if err == nil {
				var splice *wire.Splice
				rr := replica.ReadRequest{
					Offset:             rp.FetchOffset,
					CurrentLeaderEpoch: rp.CurrentLeaderEpoch,
					MaxBytes:           min(remaining, int64(rp.PartitionMaxBytes)),
					MinOneBatch:        minOneBatch,
					AnyReplica:         res.anyReplica,
					ReadCommitted:      res.readCommitted,
				}
				if res.replicaID >= 0 {
					rr.Follower = &replica.FollowerRead{ReplicaID: res.replicaID, LastFetchedEpoch: rp.LastFetchedEpoch,
						LogStartOffset: rp.LogStartOffset, Reread: reread}
				}
				var read replica.ReadResult
				splice, read, err = readPartition(p, rr, sp)
				heldBack := false
				if splice != nil && res.replicaID >= 0 && p.LeaderThrottled() && !p.InSync(res.replicaID) {
					splice = b.throttleLeader(splice, sp)
					heldBack = splice == nil
				}
				if err == nil {
					res.parts = append(res.parts, p)
					res.limits = append(res.limits, read.Limit)
					// As DelayedFetch, a throttled follower's held-back
					// records neither count nor answer it early.
					switch {
					case heldBack:
					case read.LaterSegment:
						res.olderSegment = true
					case read.More:
						res.ready += max(read.Region.Len, int64(rp.PartitionMaxBytes))
					default:
						res.ready += read.Region.Len
					}
				}
				if splice != nil && res.replicaID < 0 {
					if res.bytesOut == nil {
						res.bytesOut = map[string]int64{}
					}
					res.bytesOut[name] += splice.Region.Len
				}
				if splice != nil {
					res.response.Splices = append(res.response.Splices, *splice)
					remaining -= splice.Region.Len
					minOneBatch = false
				}
			}
			if err != nil {
				res.errors = true
				if res.failed == nil {
					res.failed = map[string]int{}
				}
				res.failed[name]++
				sp.ErrorCode = errorCode(err)
				sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
				if sp.ErrorCode == kerr.NotLeaderForPartition.Code {
					sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = leaders.note(img, name, rp.Partition)
				}
			}
		}
	}
	if r.Version >= 16 {
		for _, n := range leaders.endpoints(img) {
			resp.Brokers = append(resp.Brokers, kmsg.FetchResponseBroker{NodeID: n.NodeID, Host: n.Host, Port: n.Port, Rack: rackOrNil(n.Rack)})
		}
	}
	res.response.Body = resp
	return res
}

// fetchReplicaID is the fetching follower's broker id, or -1 for a
// consumer: ReplicaState (v15+) or ReplicaID.
func fetchReplicaID(r *kmsg.FetchRequest) int32 {
	if r.Version >= 15 {
		return r.ReplicaState.ID
	}
	return r.ReplicaID
}

// fetchTopicName resolves a fetch topic by name or, v13+, by id.
func fetchTopicName(img *metadata.Image, version int16, rt *kmsg.FetchRequestTopic) (string, error) {
	if version < 13 {
		return rt.Topic, nil
	}
	t, ok := img.TopicsByID[metadata.UUID(rt.TopicID)]
	if !ok {
		return "", kerr.UnknownTopicID
	}
	return t.Name, nil
}

// readPartition reads one partition and returns the region to splice in,
// or nil when there is nothing to send, and the read's result.
func readPartition(p *replica.Partition, rr replica.ReadRequest, sp *kmsg.FetchResponseTopicPartition) (*wire.Splice, replica.ReadResult, error) {
	res, err := p.Read(rr)
	if err != nil {
		return nil, res, storageError(err)
	}
	sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = res.HighWatermark, res.LastStableOffset, res.LogStartOffset
	for _, a := range res.AbortedTxns {
		sp.AbortedTransactions = append(sp.AbortedTransactions, kmsg.FetchResponseTopicPartitionAbortedTransaction{
			ProducerID: a.ProducerID, FirstOffset: a.FirstOffset})
	}
	if d := res.DivergingEpoch; d != nil {
		sp.DivergingEpoch.Epoch, sp.DivergingEpoch.EndOffset = d.Epoch, d.EndOffset
	}
	if res.Region.Len == 0 {
		return nil, res, nil
	}
	cookie := wire.NewCookie()
	sp.RecordBatches = cookie[:]
	return &wire.Splice{Cookie: cookie, Region: wire.FileRegion{File: res.Region.File, Pos: res.Region.Pos, Len: res.Region.Len}}, res, nil
}

// preferReadReplica answers a consumer's fetch of a partition this broker
// leads with a follower in the consumer's rack to read from instead
// (RackAwareReplicaSelector), when there is one: PreferredReadReplica,
// the offsets, no records. It reports whether it did; an error is the
// leader epoch's fencing.
func (b *Broker) preferReadReplica(img *metadata.Image, p *replica.Partition, clientRack string, rp *kmsg.FetchRequestTopicPartition, sp *kmsg.FetchResponseTopicPartition) (bool, error) {
	leader, followers, ok := p.ReadReplicas(rp.FetchOffset)
	if !ok || len(followers) == 0 {
		return false, nil
	}
	rackOf := func(id int32) string {
		if br := img.Brokers[id]; br != nil {
			return br.Rack
		}
		return ""
	}
	preferred := replica.SelectRackAware(clientRack, rackOf, leader, followers)
	if preferred < 0 {
		return false, nil
	}
	// As Kafka's, only at the leader epoch the consumer knows.
	st, err := p.Read(replica.ReadRequest{Offset: rp.FetchOffset, CurrentLeaderEpoch: rp.CurrentLeaderEpoch})
	if err != nil {
		return false, storageError(err)
	}
	sp.PreferredReadReplica = preferred
	sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = st.HighWatermark, st.HighWatermark, st.LogStartOffset
	return true, nil
}

// throttleLeader applies leader.replication.throttled.rate to a throttled
// partition's records read for a follower outside the ISR: while the rate
// is exceeded they are not sent (the follower fetches again), else they
// count towards it (Kafka's shouldLeaderThrottle).
func (b *Broker) throttleLeader(splice *wire.Splice, sp *kmsg.FetchResponseTopicPartition) *wire.Splice {
	now := b.now()
	if b.leaderQuota.Exceeded(now) {
		b.leaderQuota.NoteHeldBack()
		sp.RecordBatches = []byte{}
		return nil
	}
	b.leaderQuota.Record(now, splice.Region.Len)
	return splice
}

// fetchErrors answers each partition req names with code.
func fetchErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	r, out := req.(*kmsg.FetchRequest), resp.(*kmsg.FetchResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.HighWatermark, rp.LastStableOffset = p.Partition, code, -1, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		out.Topics = append(out.Topics, rt)
	}
}
