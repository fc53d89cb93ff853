package broker

import (
	"container/list"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Incremental fetch sessions (KIP-227). A consumer fetching many partitions
// asks for a session once; after that its requests name only the
// partitions whose fetch position changed, and responses carry only the
// partitions with something new: records, a moved high watermark, last
// stable offset or log start, or an error. An idle consumer of a thousand
// partitions then sends and receives a few bytes per poll instead of a
// thousand entries each way.
//
// Sessions live in a broker-wide cache of max.incremental.fetch.session.
// cache.slots entries; when it is full, a session idle for longer than
// fetchSessionEvictionAge makes room, otherwise the new session is
// declined (session id 0) and the client goes on with full fetches.

// fetchSessionEvictionAge is Kafka's min.incremental.fetch.session.eviction.ms.
const fetchSessionEvictionAge = 2 * time.Minute

// sessionKey names a partition in a session: by topic name before Fetch
// v13, by topic id from v13.
type sessionKey struct {
	topic     string
	topicID   [16]byte
	partition int32
}

// sessionPartition is a partition's fetch parameters and what the last
// response told the client about it.
type sessionPartition struct {
	key                sessionKey
	fetchOffset        int64
	maxBytes           int32
	currentLeaderEpoch int32
	lastFetchedEpoch   int32
	logStartOffset     int64
	// Sent to the client last time; -2 before the first response.
	highWatermark, lastStable, logStart int64
}

// fetchSession is one consumer's session. mu is held for the whole of a
// request on it, long poll included: a client has one fetch in flight per
// session.
type fetchSession struct {
	id int32
	mu sync.Mutex
	// epoch is the epoch the next incremental request must carry.
	epoch   int32
	parts   []*sessionPartition
	index   map[sessionKey]int
	version int16
	elem    *list.Element // in the cache's LRU list
	used    time.Time
}

// fetchSessions is the broker's session cache.
type fetchSessions struct {
	mu       sync.Mutex
	slots    int
	sessions map[int32]*fetchSession
	lru      list.List // front: most recently used
}

func newFetchSessions(slots int) *fetchSessions {
	return &fetchSessions{slots: slots, sessions: map[int32]*fetchSession{}}
}

// create makes a session, or returns nil when the cache is full of
// sessions in use (or sessions are disabled).
func (c *fetchSessions) create(now time.Time, version int16) *fetchSession {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.slots <= 0 {
		return nil
	}
	if len(c.sessions) >= c.slots {
		oldest := c.lru.Back()
		if oldest == nil || now.Sub(oldest.Value.(*fetchSession).used) < fetchSessionEvictionAge {
			return nil
		}
		c.removeLocked(oldest.Value.(*fetchSession))
	}
	s := &fetchSession{epoch: 1, index: map[sessionKey]int{}, version: version, used: now}
	for {
		s.id = rand.Int32N(math.MaxInt32-1) + 1
		if _, taken := c.sessions[s.id]; !taken {
			break
		}
	}
	c.sessions[s.id] = s
	s.elem = c.lru.PushFront(s)
	return s
}

// get returns a session and marks it used.
func (c *fetchSessions) get(id int32, now time.Time) *fetchSession {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.sessions[id]
	if ok {
		s.used = now
		c.lru.MoveToFront(s.elem)
	}
	return s
}

func (c *fetchSessions) remove(id int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.sessions[id]; ok {
		c.removeLocked(s)
	}
}

// c.mu must be held.
func (c *fetchSessions) removeLocked(s *fetchSession) {
	delete(c.sessions, s.id)
	c.lru.Remove(s.elem)
}

// len is the number of cached sessions.
func (c *fetchSessions) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sessions)
}

func keyFor(version int16, topic string, topicID [16]byte, partition int32) sessionKey {
	if version >= 13 {
		return sessionKey{topicID: topicID, partition: partition}
	}
	return sessionKey{topic: topic, partition: partition}
}

// update applies a request's partitions (added or changed) and forgotten
// topics to the session. s.mu must be held.
func (s *fetchSession) update(r *kmsg.FetchRequest) {
	for _, rt := range r.Topics {
		for _, rp := range rt.Partitions {
			k := keyFor(r.Version, rt.Topic, rt.TopicID, rp.Partition)
			i, ok := s.index[k]
			if !ok {
				i = len(s.parts)
				s.index[k] = i
				s.parts = append(s.parts, &sessionPartition{key: k, highWatermark: -2, lastStable: -2, logStart: -2})
			}
			p := s.parts[i]
			p.fetchOffset, p.maxBytes = rp.FetchOffset, rp.PartitionMaxBytes
			p.currentLeaderEpoch, p.lastFetchedEpoch, p.logStartOffset = rp.CurrentLeaderEpoch, rp.LastFetchedEpoch, rp.LogStartOffset
		}
	}
	if len(r.ForgottenTopics) == 0 {
		return
	}
	forget := map[sessionKey]bool{}
	for _, ft := range r.ForgottenTopics {
		for _, partition := range ft.Partitions {
			forget[keyFor(r.Version, ft.Topic, ft.TopicID, partition)] = true
		}
	}
	kept := s.parts[:0]
	clear(s.index)
	for _, p := range s.parts {
		if !forget[p.key] {
			s.index[p.key] = len(kept)
			kept = append(kept, p)
		}
	}
	clear(s.parts[len(kept):])
	s.parts = kept
}

// request is the full fetch the session stands for: every partition in
// it, grouped by topic in session order. s.mu must be held.
func (s *fetchSession) request(r *kmsg.FetchRequest) *kmsg.FetchRequest {
	full := *r
	full.Topics = nil
	full.ForgottenTopics = nil
	for _, p := range s.parts {
		n := len(full.Topics)
		if n == 0 || full.Topics[n-1].Topic != p.key.topic || full.Topics[n-1].TopicID != p.key.topicID {
			t := kmsg.NewFetchRequestTopic()
			t.Topic, t.TopicID = p.key.topic, p.key.topicID
			full.Topics = append(full.Topics, t)
			n++
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p.key.partition, p.fetchOffset, p.maxBytes
		rp.CurrentLeaderEpoch, rp.LastFetchedEpoch, rp.LogStartOffset = p.currentLeaderEpoch, p.lastFetchedEpoch, p.logStartOffset
		full.Topics[n-1].Partitions = append(full.Topics[n-1].Partitions, rp)
	}
	return &full
}

// trim turns a response to the session's full request into the
// incremental one (all partitions when full is set), remembering what was
// sent. Partitions are in session order, as request built them. s.mu must
// be held.
func (s *fetchSession) trim(resp *kmsg.FetchResponse, full bool) {
	i := 0
	topics := resp.Topics[:0]
	for _, t := range resp.Topics {
		parts := t.Partitions[:0]
		for _, sp := range t.Partitions {
			p := s.parts[i]
			i++
			changed := len(sp.RecordBatches) > 0 || sp.ErrorCode != 0 || sp.HighWatermark != p.highWatermark ||
				sp.LastStableOffset != p.lastStable || sp.LogStartOffset != p.logStart
			if !full && !changed {
				continue
			}
			p.highWatermark, p.lastStable, p.logStart = sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset
			parts = append(parts, sp)
		}
		if len(parts) > 0 {
			t.Partitions = parts
			topics = append(topics, t)
		}
	}
	resp.Topics = topics
	resp.SessionID = s.id
}

// nextEpoch advances the epoch the next request must carry, wrapping to 1
// after the largest int32 as Kafka does.
func (s *fetchSession) nextEpoch() {
	if s.epoch == math.MaxInt32 {
		s.epoch = 1
	} else {
		s.epoch++
	}
}

// sessionError is a fetch response with only a top-level error.
func sessionError(r *kmsg.FetchRequest, err *kerr.Error) *kmsg.FetchResponse {
	resp := r.ResponseKind().(*kmsg.FetchResponse)
	resp.ErrorCode = err.Code
	return resp
}

// String names a session in logs.
func (s *fetchSession) String() string { return fmt.Sprintf("fetch session %d", s.id) }
