package txn

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Config is the coordinator's configuration, with Kafka's keys.
type Config struct {
	// NumPartitions is transaction.state.log.num.partitions (50).
	NumPartitions int32
	// MaxTimeoutMs is transaction.max.timeout.ms (900000): InitProducerId
	// asking for more is INVALID_TRANSACTION_TIMEOUT.
	MaxTimeoutMs int32
	// IDExpirationMs is transactional.id.expiration.ms (604800000): a
	// transactional id with no transaction open and no update for this
	// long is forgotten.
	IDExpirationMs int64
	// AbortTimedOutIntervalMs is
	// transaction.abort.timed.out.transaction.cleanup.interval.ms (10000).
	AbortTimedOutIntervalMs int64
	// RemoveExpiredIntervalMs is
	// transaction.remove.expired.transaction.cleanup.interval.ms (3600000).
	RemoveExpiredIntervalMs int64
}

// DefaultConfig is Kafka's defaults.
func DefaultConfig() Config {
	return Config{
		NumPartitions:           50,
		MaxTimeoutMs:            900000,
		IDExpirationMs:          604800000,
		AbortTimedOutIntervalMs: 10000,
		RemoveExpiredIntervalMs: 3600000,
	}
}

// Validate reports the first setting out of range.
func (c Config) Validate() error {
	switch {
	case c.NumPartitions <= 0:
		return fmt.Errorf("txn: transaction.state.log.num.partitions %d must be positive", c.NumPartitions)
	case c.MaxTimeoutMs <= 0:
		return fmt.Errorf("txn: transaction.max.timeout.ms %d must be positive", c.MaxTimeoutMs)
	case c.IDExpirationMs <= 0:
		return fmt.Errorf("txn: transactional.id.expiration.ms %d must be positive", c.IDExpirationMs)
	case c.AbortTimedOutIntervalMs <= 0 || c.RemoveExpiredIntervalMs <= 0:
		return fmt.Errorf("txn: cleanup intervals must be positive")
	}
	return nil
}

// Write is a record for __transaction_state: the transition it carries takes
// effect once the record is committed, when the edge calls Machine.Written.
type Write struct {
	TransactionalID string
	// Key and Value are the record (Value nil: a tombstone).
	Key, Value []byte
	next       *Metadata
}

// Markers asks the edge to write a transaction's markers to its partitions'
// leaders (WriteTxnMarkers); once every partition has one, the edge calls
// Machine.MarkersWritten.
type Markers struct {
	TransactionalID  string
	ProducerID       int64
	ProducerEpoch    int16
	Commit           bool
	CoordinatorEpoch int32
	Partitions       []TopicPartition
}

// Result is a request's outcome. When Write is set, the answer waits for it:
// if the append fails, the request gets the append's error; otherwise it
// gets Err (nil: success) and the producer id and epoch.
type Result struct {
	Err           error
	ProducerID    int64
	ProducerEpoch int16
	Write         *Write
	// NeedProducerID asks the edge for a fresh producer id: call again
	// with it in FreshProducerID.
	NeedProducerID bool
}

func fail(err error, format string, args ...any) Result {
	return Result{Err: fmt.Errorf("%w: "+format, append([]any{err}, args...)...), ProducerID: -1, ProducerEpoch: -1}
}

// Machine is the coordinator state of one __transaction_state partition:
// pure data, inputs in and effects out. It is not safe for concurrent use;
// the edge holds its lock around every call.
type Machine struct {
	cfg              Config
	coordinatorEpoch int32
	txns             map[string]*Metadata
}

// NewMachine returns an empty machine for a partition led at
// coordinatorEpoch (the partition's leader epoch): markers carry it, and a
// partition refuses markers from an older coordinator.
func NewMachine(cfg Config, coordinatorEpoch int32) *Machine {
	return &Machine{cfg: cfg, coordinatorEpoch: coordinatorEpoch, txns: make(map[string]*Metadata)}
}

// Get returns a copy of a transactional id's metadata.
func (m *Machine) Get(id string) (Metadata, bool) {
	t := m.txns[id]
	if t == nil {
		return Metadata{}, false
	}
	return *t.clone(), true
}

// All returns copies of every transactional id's metadata, sorted by id.
func (m *Machine) All() []Metadata {
	out := make([]Metadata, 0, len(m.txns))
	for _, t := range m.txns {
		out = append(out, *t.clone())
	}
	slices.SortFunc(out, func(a, b Metadata) int {
		if a.TransactionalID < b.TransactionalID {
			return -1
		}
		if a.TransactionalID > b.TransactionalID {
			return 1
		}
		return 0
	})
	return out
}

// Replay applies one record of the partition, in log order, while loading.
func (m *Machine) Replay(key, value []byte) error {
	id, ok, err := decodeKey(key)
	if err != nil || !ok {
		return err
	}
	if value == nil {
		delete(m.txns, id)
		return nil
	}
	t, err := decodeValue(id, value)
	if err != nil {
		return err
	}
	if old := m.txns[id]; old != nil {
		t.LastProducerEpoch = old.LastProducerEpoch
	}
	m.txns[id] = t
	return nil
}

// Loaded returns the markers to send for the transactions a load found
// prepared but not complete: the previous coordinator may have died before
// writing them all. Kafka resends them the same way.
func (m *Machine) Loaded() []Markers {
	var out []Markers
	for _, t := range m.txns {
		if (t.State == PrepareCommit || t.State == PrepareAbort) && !t.markersSent && t.pending == nil {
			out = append(out, m.markersFor(t))
		}
	}
	slices.SortFunc(out, func(a, b Markers) int {
		if a.TransactionalID < b.TransactionalID {
			return -1
		}
		return 1
	})
	return out
}

func (m *Machine) markersFor(t *Metadata) Markers {
	t.markersSent = true
	return Markers{
		TransactionalID:  t.TransactionalID,
		ProducerID:       t.ProducerID,
		ProducerEpoch:    t.ProducerEpoch,
		Commit:           t.State == PrepareCommit,
		CoordinatorEpoch: m.coordinatorEpoch,
		Partitions:       slices.Clone(t.Partitions),
	}
}

// prepare makes next the pending transition of t and returns its record.
func (m *Machine) prepare(t *Metadata, next *Metadata) *Write {
	if !slices.Contains(validPrevious[next.State], t.State) {
		panic(fmt.Sprintf("txn: transition of %q from %v to %v", t.TransactionalID, t.State, next.State))
	}
	t.pending = next
	w := &Write{TransactionalID: t.TransactionalID, Key: encodeKey(t.TransactionalID), next: next}
	if next.State != Dead {
		w.Value = encodeValue(next)
	}
	return w
}

// Written completes w's transition once its record is committed (err nil),
// or drops it (err non-nil). It returns the markers to send when the
// transaction is now prepared.
func (m *Machine) Written(w *Write, err error) []Markers {
	t := m.txns[w.TransactionalID]
	if t == nil || t.pending != w.next {
		return nil
	}
	t.pending = nil
	if err != nil {
		if t.State == Empty && t.ProducerEpoch < 0 {
			// Created by this request and never written.
			delete(m.txns, w.TransactionalID)
		}
		return nil
	}
	if w.next.State == Dead {
		delete(m.txns, w.TransactionalID)
		return nil
	}
	*t = *w.next
	t.pending = nil
	if t.State == PrepareCommit || t.State == PrepareAbort {
		return []Markers{m.markersFor(t)}
	}
	return nil
}

// MarkersWritten completes a prepared transaction once every partition has
// its marker: the returned record moves it to CompleteCommit or
// CompleteAbort. It returns nil when the transaction moved on meanwhile.
func (m *Machine) MarkersWritten(mk Markers, nowMs int64) *Write {
	t := m.txns[mk.TransactionalID]
	if t == nil || t.pending != nil || t.ProducerID != mk.ProducerID || t.ProducerEpoch != mk.ProducerEpoch {
		return nil
	}
	var done State
	switch {
	case t.State == PrepareCommit && mk.Commit:
		done = CompleteCommit
	case t.State == PrepareAbort && !mk.Commit:
		done = CompleteAbort
	default:
		return nil
	}
	t.markersSent = false
	next := t.clone()
	next.State = done
	next.Partitions = nil
	next.LastUpdateMs = nowMs
	if t.NextProducerID >= 0 {
		// A v2 end at an exhausted epoch: the markers closed the
		// transaction at the old id; the producer goes on at the new
		// one, and a retry names the old one with its last epoch.
		next.PreviousProducerID, next.ProducerID, next.ProducerEpoch = t.ProducerID, t.NextProducerID, 0
		next.NextProducerID = -1
	}
	return m.prepare(t, next)
}

// InitProducerIDRequest is InitProducerId with a transactional id.
type InitProducerIDRequest struct {
	TransactionalID string
	TimeoutMs       int32
	// ProducerID and ProducerEpoch are v3+'s expected id and epoch
	// (KIP-360), -1 when not given.
	ProducerID    int64
	ProducerEpoch int16
	// FreshProducerID is a never used producer id when the edge was asked
	// for one (Result.NeedProducerID), -1 otherwise.
	FreshProducerID int64
	NowMs           int64
}

// InitProducerID is Kafka's TransactionCoordinator.handleInitProducerId
// for a transactional id: a new id starts at epoch 0, a known one has its
// epoch bumped (fencing older producers), an ongoing transaction is aborted
// with a bumped epoch first (the client retries on CONCURRENT_TRANSACTIONS),
// and an exhausted epoch rotates to a new producer id.
func (m *Machine) InitProducerID(r InitProducerIDRequest) Result {
	if r.TransactionalID == "" {
		return fail(kerr.InvalidRequest, "empty transactional id")
	}
	if r.TimeoutMs <= 0 || r.TimeoutMs > m.cfg.MaxTimeoutMs {
		return fail(kerr.InvalidTransactionTimeout, "timeout %d ms, transaction.max.timeout.ms %d", r.TimeoutMs, m.cfg.MaxTimeoutMs)
	}
	expected := r.ProducerID >= 0 || r.ProducerEpoch >= 0
	t := m.txns[r.TransactionalID]
	if t == nil {
		if r.FreshProducerID < 0 {
			return Result{NeedProducerID: true}
		}
		t = &Metadata{
			TransactionalID: r.TransactionalID, ProducerID: r.FreshProducerID, PreviousProducerID: -1, NextProducerID: -1,
			ProducerEpoch: -1, LastProducerEpoch: -1, TimeoutMs: r.TimeoutMs, State: Empty,
			StartMs: -1, LastUpdateMs: r.NowMs,
		}
		m.txns[r.TransactionalID] = t
		r.FreshProducerID = -1
	}
	if t.pending != nil {
		return fail(kerr.ConcurrentTransactions, "%q has a transition being written", t.TransactionalID)
	}
	if expected && !(t.ProducerEpoch < 0 || r.ProducerID == t.ProducerID ||
		(r.ProducerID == t.PreviousProducerID && epochExhausted(r.ProducerEpoch))) {
		return fail(kerr.ProducerFenced, "producer id %d is not %q's (%d)", r.ProducerID, t.TransactionalID, t.ProducerID)
	}
	switch t.State {
	case PrepareCommit, PrepareAbort:
		return fail(kerr.ConcurrentTransactions, "%q is completing a transaction (%v)", t.TransactionalID, t.State)
	case Ongoing:
		// Abort it first with a bumped epoch that is never returned; the
		// retry bumps again.
		res := fail(kerr.ConcurrentTransactions, "aborting %q's ongoing transaction", t.TransactionalID)
		res.Write = m.fenceAndAbort(t, r.NowMs)
		return res
	case Empty, CompleteCommit, CompleteAbort:
	default:
		panic(fmt.Sprintf("txn: %q in state %v", t.TransactionalID, t.State))
	}
	next := t.clone()
	next.State = Empty
	next.Partitions = nil
	next.TimeoutMs = r.TimeoutMs
	next.StartMs = -1
	next.LastUpdateMs = r.NowMs
	if epochExhausted(t.ProducerEpoch) && (!expected || r.ProducerEpoch == t.ProducerEpoch) {
		if r.FreshProducerID < 0 {
			return Result{NeedProducerID: true}
		}
		next.PreviousProducerID, next.LastProducerEpoch = -1, -1
		if expected {
			next.PreviousProducerID, next.LastProducerEpoch = t.ProducerID, t.ProducerEpoch
		}
		next.ProducerID, next.ProducerEpoch = r.FreshProducerID, 0
	} else {
		switch {
		case !expected || t.ProducerEpoch < 0 || r.ProducerEpoch == t.ProducerEpoch:
			next.ProducerEpoch, next.LastProducerEpoch = t.ProducerEpoch+1, t.ProducerEpoch
			if !expected {
				next.LastProducerEpoch = -1
			}
		case r.ProducerEpoch == t.LastProducerEpoch:
			// A retry of the bump that got us here: answer it again.
		default:
			return fail(kerr.ProducerFenced, "epoch %d, %q is at %d", r.ProducerEpoch, t.TransactionalID, t.ProducerEpoch)
		}
	}
	return Result{ProducerID: next.ProducerID, ProducerEpoch: next.ProducerEpoch, Write: m.prepare(t, next)}
}

// fenceAndAbort bumps t's epoch and aborts its ongoing transaction:
// Kafka's prepareFenceProducerEpoch followed by an abort that is not from
// the client. The bumped epoch fences the old producer at the coordinator,
// and the markers carrying it fence it at the partitions.
func (m *Machine) fenceAndAbort(t *Metadata, nowMs int64) *Write {
	next := t.clone()
	if next.ProducerEpoch < 1<<15-1 {
		next.ProducerEpoch++
	}
	next.LastProducerEpoch = -1
	next.State = PrepareAbort
	next.LastUpdateMs = nowMs
	return m.prepare(t, next)
}

// check validates a request's producer id and epoch against t.
func check(t *Metadata, id string, producerID int64, epoch int16) error {
	switch {
	case t == nil:
		return fmt.Errorf("%w: no producer id for %q", kerr.InvalidProducerIDMapping, id)
	case t.ProducerID != producerID:
		return fmt.Errorf("%w: producer id %d is not %q's (%d)", kerr.InvalidProducerIDMapping, producerID, id, t.ProducerID)
	case t.ProducerEpoch != epoch:
		return fmt.Errorf("%w: epoch %d, %q is at %d", kerr.ProducerFenced, epoch, id, t.ProducerEpoch)
	}
	return nil
}

// AddPartitions is AddPartitionsToTxn (and AddOffsetsToTxn, with the
// group's __consumer_offsets partition): the partitions join the
// transaction, which goes Ongoing. With verifyOnly (v4+ VerifyOnly,
// KIP-890 part 1) nothing is added: the error says whether each partition
// already is in the transaction.
func (m *Machine) AddPartitions(id string, producerID int64, epoch int16, tps []TopicPartition, verifyOnly bool, nowMs int64) (Result, map[TopicPartition]error) {
	return m.addPartitions(id, producerID, epoch, tps, verifyOnly, false, nowMs)
}

// AddPartitionsImplicitly is transactions version 2's add (KIP-890 part
// 2): a partition leader adds the partition of a Produce v12+ (or the
// group's offsets partition of a TxnOffsetCommit v5+) before the first
// write of the transaction to it, the client sending no
// AddPartitionsToTxn. It is AddPartitions, and marks the transaction v2.
func (m *Machine) AddPartitionsImplicitly(id string, producerID int64, epoch int16, tps []TopicPartition, nowMs int64) Result {
	res, _ := m.addPartitions(id, producerID, epoch, tps, false, true, nowMs)
	return res
}

func (m *Machine) addPartitions(id string, producerID int64, epoch int16, tps []TopicPartition, verifyOnly, v2 bool, nowMs int64) (Result, map[TopicPartition]error) {
	t := m.txns[id]
	if id == "" {
		return fail(kerr.InvalidRequest, "empty transactional id"), nil
	}
	if err := check(t, id, producerID, epoch); err != nil {
		return Result{Err: err}, nil
	}
	if verifyOnly {
		if t.State == PrepareCommit || t.State == PrepareAbort {
			return fail(kerr.ConcurrentTransactions, "%q is completing a transaction", id), nil
		}
		errs := make(map[TopicPartition]error, len(tps))
		for _, tp := range tps {
			if !t.hasPartition(tp) || t.State != Ongoing {
				errs[tp] = fmt.Errorf("%w: %s[%d] is not in %q's transaction", kerr.TransactionAbortable, tp.Topic, tp.Partition, id)
			}
		}
		return Result{}, errs
	}
	switch {
	case t.pending != nil:
		return fail(kerr.ConcurrentTransactions, "%q has a transition being written", id), nil
	case t.State == PrepareCommit || t.State == PrepareAbort:
		return fail(kerr.ConcurrentTransactions, "%q is completing a transaction", id), nil
	}
	if t.State == Ongoing && !slices.ContainsFunc(tps, func(tp TopicPartition) bool { return !t.hasPartition(tp) }) {
		return Result{}, nil
	}
	next := t.clone()
	if v2 {
		next.ClientTransactionVersion = 2
	}
	if t.State != Ongoing {
		next.StartMs = nowMs
	}
	next.State = Ongoing
	next.Partitions = addPartitions(t.Partitions, tps)
	next.LastUpdateMs = nowMs
	return Result{Write: m.prepare(t, next)}, nil
}

// EndTxnRequest is EndTxn from a client.
type EndTxnRequest struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	Commit          bool
	// V2 is set for EndTxn v5+ (transactions version 2, KIP-890 part
	// 2): the epoch is bumped at every transaction end.
	V2 bool
	// FreshProducerID is a never used producer id when the edge was asked
	// for one (Result.NeedProducerID), -1 otherwise.
	FreshProducerID int64
	NowMs           int64
}

// EndTxn is Kafka's endTransaction from a client. A retry of a completed
// EndTxn succeeds; one still sending markers gets CONCURRENT_TRANSACTIONS.
//
// Transactions v1 (EndTxn before v5) keep the epoch. With v2 the
// transaction ends at epoch+1, the epoch the markers carry and the
// producer's next transaction uses (the result's, which EndTxn v5
// answers); an exhausted epoch ends at a new producer id instead, as
// Kafka's prepareAbortOrCommit and prepareComplete do. So the previous
// transaction's epoch is fenced: a late EndTxn or produce of it cannot
// end or join the next one.
func (m *Machine) EndTxn(r EndTxnRequest) Result {
	if r.TransactionalID == "" {
		return fail(kerr.InvalidRequest, "empty transactional id")
	}
	if r.V2 {
		return m.endTxnV2(r)
	}
	id, commit := r.TransactionalID, r.Commit
	t := m.txns[id]
	if err := check(t, id, r.ProducerID, r.ProducerEpoch); err != nil {
		return Result{Err: err, ProducerID: -1, ProducerEpoch: -1}
	}
	if t.pending != nil {
		return fail(kerr.ConcurrentTransactions, "%q has a transition being written", id)
	}
	ok := Result{ProducerID: t.ProducerID, ProducerEpoch: t.ProducerEpoch}
	switch t.State {
	case Ongoing:
		ok.Write = m.prepareEnd(t, commit, false, false, -1, r.NowMs)
		return ok
	case CompleteCommit:
		if commit {
			return ok
		}
	case CompleteAbort:
		if !commit {
			return ok
		}
	case PrepareCommit, PrepareAbort:
		if commit == (t.State == PrepareCommit) {
			return fail(kerr.ConcurrentTransactions, "%q is %v", id, t.State)
		}
	}
	return fail(kerr.InvalidTxnState, "%q is %v; EndTxn(commit=%v)", id, t.State, commit)
}

// endTxnV2 is EndTxn v5+: Kafka's endTransaction with a client at
// transactions version 2. With the epoch bumped at every end, the
// request's epoch tells a retry (the epoch just ended, one below the
// current, or the last epoch of the previous producer id after a
// rotation) from the next transaction's EndTxn (the current epoch), so
// the state alone no longer decides, and anything else is fenced.
func (m *Machine) endTxnV2(r EndTxnRequest) Result {
	id, commit := r.TransactionalID, r.Commit
	t := m.txns[id]
	switch {
	case t == nil:
		return fail(kerr.InvalidProducerIDMapping, "no producer id for %q", id)
	case t.pending != nil:
		// First, so that a completion being written is not taken for
		// a fence (KAFKA-18464).
		return fail(kerr.ConcurrentTransactions, "%q has a transition being written", id)
	}
	retryOnOverflow := t.PreviousProducerID == r.ProducerID && r.ProducerEpoch == 1<<15-2 && t.ProducerEpoch == 0
	retryOnBump := t.ProducerID == r.ProducerID && int32(t.ProducerEpoch) == int32(r.ProducerEpoch)+1
	if t.ProducerID != r.ProducerID && !retryOnOverflow {
		return fail(kerr.InvalidProducerIDMapping, "producer id %d is not %q's (%d)", r.ProducerID, id, t.ProducerID)
	}
	var valid bool
	switch t.State {
	case Ongoing, Empty:
		valid = r.ProducerEpoch == t.ProducerEpoch
	case PrepareCommit, PrepareAbort:
		// The markers are being written (Kafka's pending CompleteX
		// transition): a retry of the EndTxn that ended the
		// transaction, or the next transaction's EndTxn at the bumped
		// epoch, which the coordinator answered before the markers
		// were out. The latter waits for them, as in Kafka since
		// KAFKA-18464, instead of being fenced: a producer told it is
		// fenced cannot go on.
		valid = retryOnBump || r.ProducerEpoch == t.ProducerEpoch
	case CompleteCommit, CompleteAbort:
		valid = retryOnBump || retryOnOverflow || r.ProducerEpoch == t.ProducerEpoch
	}
	if !valid {
		return fail(kerr.ProducerFenced, "epoch %d, %q is at %d (%v)", r.ProducerEpoch, id, t.ProducerEpoch, t.State)
	}
	retry := retryOnBump || retryOnOverflow
	end := func(commit, empty bool) Result {
		next := int64(-1)
		if epochExhausted(t.ProducerEpoch) {
			if r.FreshProducerID < 0 {
				return Result{NeedProducerID: true}
			}
			next = r.FreshProducerID
		}
		w := m.prepareEnd(t, commit, true, empty, next, r.NowMs)
		res := Result{ProducerID: w.next.ProducerID, ProducerEpoch: w.next.ProducerEpoch, Write: w}
		if next >= 0 {
			res.ProducerID, res.ProducerEpoch = next, 0
		}
		return res
	}
	done := Result{ProducerID: t.ProducerID, ProducerEpoch: t.ProducerEpoch}
	switch {
	case (t.State == PrepareCommit || t.State == PrepareAbort) && !retry:
		return fail(kerr.ConcurrentTransactions, "%q is %v: the markers of epoch %d are being written", id, t.State, t.ProducerEpoch)
	case t.State == Ongoing:
		return end(commit, false)
	case t.State == CompleteCommit && commit && retry, t.State == CompleteAbort && !commit && retry:
		return done
	case (t.State == CompleteCommit || t.State == CompleteAbort || t.State == Empty) && !commit && !retry:
		// Aborting an empty transaction is allowed with v2: it bumps
		// the epoch, fencing whatever the client may have sent.
		return end(false, true)
	case (t.State == PrepareCommit && commit) || (t.State == PrepareAbort && !commit):
		return fail(kerr.ConcurrentTransactions, "%q is %v", id, t.State)
	}
	return fail(kerr.InvalidTxnState, "%q is %v at epoch %d; EndTxn(commit=%v) at epoch %d", id, t.State, t.ProducerEpoch, commit, r.ProducerEpoch)
}

// prepareEnd moves t to PrepareCommit or PrepareAbort. With v2 the
// epoch is bumped (nextProducerID ≥ 0 when it is exhausted: the id the
// transaction completes at), and empty marks an abort with no partitions,
// whose transaction starts now.
func (m *Machine) prepareEnd(t *Metadata, commit, v2, empty bool, nextProducerID int64, nowMs int64) *Write {
	next := t.clone()
	next.State = PrepareAbort
	if commit {
		next.State = PrepareCommit
	}
	if v2 {
		next.ClientTransactionVersion = 2
		next.LastProducerEpoch = t.ProducerEpoch
		if next.ProducerEpoch < 1<<15-1 {
			next.ProducerEpoch++
		}
		next.NextProducerID = nextProducerID
	}
	if empty {
		next.StartMs = nowMs
	}
	next.LastUpdateMs = nowMs
	return m.prepare(t, next)
}

// Tick runs the coordinator's periodic work at nowMs: ongoing transactions
// older than their timeout are aborted with a bumped epoch (when
// abortTimedOut), and idle transactional ids older than
// transactional.id.expiration.ms are deleted (when removeExpired). The
// edge calls it every AbortTimedOutIntervalMs and RemoveExpiredIntervalMs.
func (m *Machine) Tick(nowMs int64, abortTimedOut, removeExpired bool) []*Write {
	var out []*Write
	ids := make([]string, 0, len(m.txns))
	for id := range m.txns {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		t := m.txns[id]
		if t.pending != nil {
			continue
		}
		switch t.State {
		case Ongoing:
			if abortTimedOut && t.StartMs+int64(t.TimeoutMs) < nowMs {
				out = append(out, m.fenceAndAbort(t, nowMs))
			}
		case Empty, CompleteCommit, CompleteAbort:
			if removeExpired && t.LastUpdateMs+m.cfg.IDExpirationMs <= nowMs {
				next := t.clone()
				next.State = Dead
				out = append(out, m.prepare(t, next))
			}
		}
	}
	return out
}
