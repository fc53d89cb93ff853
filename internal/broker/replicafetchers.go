package broker

import (
	"log/slog"
	"sync"

	"github.com/strata-io/strata/internal/replica"
)

// replicaFetchers are this broker's replica fetchers: one replica.Fetcher
// per source broker for every partition followed there, as Kafka's
// ReplicaFetcherManager keeps them with num.replica.fetchers=1. applyImage
// adds a partition when it becomes a follower of a leader and removes it
// when it leads, loses its leader or goes; a fetcher left without
// partitions stops (Kafka's shutdownIdleFetcherThreads). A source whose
// endpoint changed (it re-registered elsewhere) gets a new fetcher, with
// its partitions. Its methods may be called concurrently; mu is taken
// before any Fetcher's lock and never held while a fetcher stops.
type replicaFetchers struct {
	cfg    replica.FetcherConfig
	logger *slog.Logger
	// dial connects to a source broker; dialLeader unless a test says
	// otherwise.
	dial func(addr string, nodeID int32) (leaderClient, error)

	mu sync.Mutex
	// sources are the running fetchers by source broker id.
	sources map[int32]*sourceFetcher
	// following maps each partition followed to its source.
	following map[*replica.Partition]int32
	closed    bool
}

// sourceFetcher is one source broker's fetcher and the connection it uses.
type sourceFetcher struct {
	addr    string
	client  leaderClient
	fetcher *replica.Fetcher
	// partitions are the partitions followed there, with their topic ids
	// (kept to move them to a new fetcher when the endpoint changes).
	partitions map[*replica.Partition][16]byte
}

func newReplicaFetchers(cfg replica.FetcherConfig, logger *slog.Logger) *replicaFetchers {
	return &replicaFetchers{cfg: cfg, logger: logger,
		dial:    func(addr string, nodeID int32) (leaderClient, error) { return dialLeader(addr, nodeID, nil) },
		sources: map[int32]*sourceFetcher{}, following: map[*replica.Partition]int32{}}
}

// follow has p, of the topic with id topicID, replicated from source,
// reached at addr (the leader's endpoint on inter.broker.listener.name).
// A partition that followed another source moves.
func (f *replicaFetchers) follow(p *replica.Partition, topicID [16]byte, source int32, addr string) error {
	var stop []*sourceFetcher
	defer func() {
		for _, s := range stop {
			s.stop()
		}
	}()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	if old, ok := f.following[p]; ok && old != source {
		if s := f.removeLocked(p); s != nil {
			stop = append(stop, s)
		}
	}
	s := f.sources[source]
	var moved map[*replica.Partition][16]byte
	if s != nil && s.addr != addr {
		// The source moved: its partitions go to a fetcher at the new
		// address.
		f.logger.Info("replica fetcher source moved", "source", source, "from", s.addr, "to", addr)
		delete(f.sources, source)
		stop = append(stop, s)
		moved, s = s.partitions, nil
	}
	if s == nil {
		client, err := f.dial(addr, f.cfg.ReplicaID)
		if err != nil {
			for mp := range moved {
				delete(f.following, mp)
			}
			return err
		}
		s = &sourceFetcher{addr: addr, client: client, fetcher: replica.StartFetcher(source, client, f.cfg),
			partitions: map[*replica.Partition][16]byte{}}
		f.sources[source] = s
		f.logger.Info("replica fetcher started", "source", source, "addr", addr)
	}
	for mp, id := range moved {
		s.partitions[mp] = id
		s.fetcher.Add(mp, id)
	}
	s.partitions[p] = topicID
	f.following[p] = source
	s.fetcher.Add(p, topicID)
	return nil
}

// unfollow stops replicating p, and stops its source's fetcher if p was
// the last partition followed there.
func (f *replicaFetchers) unfollow(p *replica.Partition) {
	f.mu.Lock()
	s := f.removeLocked(p)
	f.mu.Unlock()
	if s != nil {
		s.stop()
	}
}

// removeLocked removes p from its source's fetcher and returns that
// fetcher when it is left idle, for the caller to stop outside f.mu.
// f.mu must be held.
func (f *replicaFetchers) removeLocked(p *replica.Partition) *sourceFetcher {
	source, ok := f.following[p]
	if !ok {
		return nil
	}
	delete(f.following, p)
	s := f.sources[source]
	if s == nil {
		return nil
	}
	delete(s.partitions, p)
	s.fetcher.Remove(p)
	if len(s.partitions) > 0 {
		return nil
	}
	delete(f.sources, source)
	f.logger.Info("replica fetcher stopped: nothing left to follow", "source", source)
	return s
}

// source returns the broker p is followed from, if any.
func (f *replicaFetchers) source(p *replica.Partition) (int32, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.following[p]
	return s, ok
}

// running returns how many fetchers run.
func (f *replicaFetchers) running() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sources)
}

// close stops every fetcher; follow does nothing afterwards.
func (f *replicaFetchers) close() {
	f.mu.Lock()
	f.closed = true
	sources := f.sources
	f.sources, f.following = map[int32]*sourceFetcher{}, map[*replica.Partition]int32{}
	f.mu.Unlock()
	for _, s := range sources {
		s.stop()
	}
}

// stop ends the fetcher and closes its connection.
func (s *sourceFetcher) stop() {
	s.fetcher.Stop()
	s.client.Close()
}
