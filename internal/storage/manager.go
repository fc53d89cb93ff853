package storage

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/vfs"
)

// ManagerOptions configure a Manager.
type ManagerOptions struct {
	// Logger receives events; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Default is the configuration of logs opened from disk; the zero
	// value means DefaultConfig().
	Default Config
	// ConfigFor, when set, gives a topic's configuration (its overrides on
	// top of the defaults) for logs opened from disk.
	ConfigFor func(topic string) Config
	// RecoveryThreads is num.recovery.threads.per.data.dir (Kafka's default
	// 1): how many logs are opened and recovered, and closed at shutdown, in
	// parallel, at most GOMAXPROCS. 0 means GOMAXPROCS. SetRecoveryThreads
	// changes it for the next shutdown.
	RecoveryThreads int
	// RetentionCheckInterval is log.retention.check.interval.ms (default
	// 300000) for the loop Start runs.
	RetentionCheckInterval time.Duration
	// FlushCheckInterval is log.flush.scheduler.interval.ms: how often
	// Start's loop applies flush.ms. Kafka's default never checks; 0 here
	// means one second.
	FlushCheckInterval time.Duration
	// CheckpointInterval is log.flush.offset.checkpoint.interval.ms
	// (default 60000): how often Start's loop writes the recovery-point and
	// log-start-offset checkpoints.
	CheckpointInterval time.Duration
	// HighWatermarkCheckpointInterval is
	// replica.high.watermark.checkpoint.interval.ms (default 5000): how
	// often Start's loop writes replication-offset-checkpoint.
	HighWatermarkCheckpointInterval time.Duration
	// Skip, when set, names directories of the data dir that are not
	// partition logs of this Manager (a metadata log kept elsewhere).
	Skip func(dirName string) bool

	// DisableCleaner is log.cleaner.enable=false (default true): Start
	// runs no log cleaner and compacted logs grow like any other.
	DisableCleaner bool
	// CleanerBackoff, CleanerThreads, CleanerDedupeBufferSize and
	// ProducerIDExpirationMs start the cleaner's settings, which
	// SetCleanerSettings changes (see CleanerSettings).
	//
	// CleanerBackoff is log.cleaner.backoff.ms (default 15000): how often
	// the cleaner looks for logs to clean.
	CleanerBackoff time.Duration
	// CleanerThreads is log.cleaner.threads (default 1): how many logs
	// are cleaned at once.
	CleanerThreads int
	// CleanerDedupeBufferSize is log.cleaner.dedupe.buffer.size (default
	// 134217728): the offset maps' memory, shared by the threads.
	CleanerDedupeBufferSize int64
	// ProducerIDExpirationMs is producer.id.expiration.ms (default
	// 86400000): see CleanOptions.
	ProducerIDExpirationMs int64
	// DecompressionBudget is shared by every log (see
	// LogOptions.DecompressionBudget); nil means record.DefaultBudget.
	DecompressionBudget *record.Budget
}

// Manager owns one data directory (a log.dirs entry) and every partition
// log in it. Its methods may be called concurrently.
type Manager struct {
	fs     vfs.FS
	dir    string
	opts   ManagerOptions
	logger *slog.Logger
	now    func() time.Time

	checkpointMu sync.Mutex // serializes checkpoint files writes

	mu       sync.RWMutex
	logs     map[TopicPartition]*Log
	deleting map[*Log]*time.Timer
	closed   bool

	stop, done  chan struct{}
	cleanerDone chan struct{} // closed when the cleaner's loop ends
	flusherDone chan struct{} // closed when the roll flusher ends

	rollMu sync.Mutex // guards rolled.logs; taken under a Log's appendMu, never held while taking another lock
	rolled rollQueue

	recoveryThreads atomic.Int64
	// cleanShutdownBrokerEpoch is the broker epoch the clean-shutdown
	// marker held when the directory was opened (-1: unclean, or none
	// written); brokerEpoch the one Close writes in it.
	cleanShutdownBrokerEpoch int64
	brokerEpoch              atomic.Int64
	cleaner                  atomic.Pointer[CleanerSettings]
	cleanerChanged           chan struct{} // signalled (without blocking) by SetCleanerSettings
}

// CleanerSettings are the log cleaner's broker keys that may change while
// the Manager runs (Kafka's LogCleaner reconfigurable keys).
type CleanerSettings struct {
	// Backoff is log.cleaner.backoff.ms (default 15000): how often the
	// cleaner looks for logs to clean.
	Backoff time.Duration
	// Threads is log.cleaner.threads (default 1): how many logs are
	// cleaned at once.
	Threads int
	// DedupeBufferSize is log.cleaner.dedupe.buffer.size (default
	// 134217728): the offset maps' memory, shared by the threads.
	DedupeBufferSize int64
	// ProducerIDExpirationMs is producer.id.expiration.ms (default
	// 86400000): see CleanOptions.
	ProducerIDExpirationMs int64
}

// SetCleanerSettings changes the cleaner's keys: a round under way keeps
// the old ones, the next one (after the new backoff) takes these.
func (m *Manager) SetCleanerSettings(s CleanerSettings) {
	m.cleaner.Store(&s)
	select {
	case m.cleanerChanged <- struct{}{}:
	default:
	}
}

// cleanerSettings returns the cleaner's keys, defaults filled in.
func (m *Manager) cleanerSettings() CleanerSettings {
	s := *m.cleaner.Load()
	if s.Backoff <= 0 {
		s.Backoff = 15 * time.Second
	}
	s.Threads = max(s.Threads, 1)
	if s.DedupeBufferSize <= 0 {
		s.DedupeBufferSize = 128 << 20
	}
	return s
}

// OpenManager opens every partition directory in dir (creating dir if
// needed). Without a clean-shutdown marker, each log is recovered from its
// checkpointed recovery point; logs are opened in parallel. The marker is
// removed once all are open: a crash from now on is unclean. Directories of
// deleted partitions ("-delete") left by a crash are removed; "-future" and
// "-stray" directories are ignored.
func OpenManager(fs vfs.FS, dir string, opts ManagerOptions) (*Manager, error) {
	if opts.Default == (Config{}) {
		opts.Default = DefaultConfig()
	}
	if err := opts.Default.Validate(); err != nil {
		return nil, err
	}
	m := &Manager{fs: fs, dir: dir, opts: opts, logger: opts.Logger, now: opts.Now,
		logs: map[TopicPartition]*Log{}, deleting: map[*Log]*time.Timer{}}
	m.recoveryThreads.Store(int64(opts.RecoveryThreads))
	m.cleanerChanged = make(chan struct{}, 1)
	m.rolled = rollQueue{logs: map[*Log]struct{}{}, signal: make(chan struct{}, 1)}
	m.cleaner.Store(&CleanerSettings{Backoff: opts.CleanerBackoff, Threads: opts.CleanerThreads,
		DedupeBufferSize: opts.CleanerDedupeBufferSize, ProducerIDExpirationMs: opts.ProducerIDExpirationMs})
	if m.logger == nil {
		m.logger = slog.Default()
	}
	if m.now == nil {
		m.now = time.Now
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := vfs.SyncDir(fs, filepath.Dir(filepath.Clean(dir))); err != nil {
		return nil, err
	}
	recoveryPoints := m.readCheckpoint(RecoveryPointCheckpointFile)
	logStarts := m.readCheckpoint(LogStartOffsetCheckpointFile)
	cleanerPoints := m.readCheckpoint(CleanerOffsetCheckpointFile)
	highWatermarks := m.readCheckpoint(HighWatermarkCheckpointFile)
	markerPath := filepath.Join(dir, CleanShutdownFile)
	clean := vfs.Exists(fs, markerPath)
	m.cleanShutdownBrokerEpoch = -1
	m.brokerEpoch.Store(-1)
	if clean {
		m.cleanShutdownBrokerEpoch = readCleanShutdownEpoch(fs, markerPath)
	}

	names, err := fs.List(dir)
	if err != nil {
		return nil, err
	}
	var toOpen []TopicPartition
	for _, name := range names {
		path := filepath.Join(dir, name)
		st, err := fs.Stat(path)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			if strings.HasSuffix(name, tmpSuffix) {
				if err := fs.Remove(path); err != nil {
					return nil, err
				}
			}
			continue
		}
		switch {
		case strings.HasSuffix(name, "-delete"):
			m.logger.Info("removing deleted partition directory", "dir", name)
			if err := fs.RemoveAll(path); err != nil {
				return nil, err
			}
			continue
		case strings.HasSuffix(name, "-future"), strings.HasSuffix(name, "-stray"):
			m.logger.Warn("ignoring partition directory", "dir", name)
			continue
		case opts.Skip != nil && opts.Skip(name):
			continue
		}
		tp, err := ParsePartitionDir(name)
		if err != nil {
			m.logger.Warn("ignoring directory that is not a partition", "dir", name)
			continue
		}
		toOpen = append(toOpen, tp)
	}

	start := time.Now()
	if err := m.openAll(toOpen, checkpoints{recoveryPoints, logStarts, cleanerPoints, highWatermarks}, clean); err != nil {
		for _, l := range m.logs {
			l.Close()
		}
		return nil, err
	}
	if clean {
		if err := fs.Remove(markerPath); err != nil {
			m.closeLogs()
			return nil, err
		}
	}
	if err := vfs.SyncDir(fs, dir); err != nil {
		m.closeLogs()
		return nil, err
	}
	m.logOpened(clean, time.Since(start))
	m.checkFileLimit()
	m.queueUnflushedRolls()
	return m, nil
}

// logOpened writes the one line that sums up the opening: how many logs,
// how much recovery read, and, as a warning, the partitions in which it
// found corruption, counted by cause, with a few of their names (each
// log's details are debug lines).
func (m *Manager) logOpened(clean bool, took time.Duration) {
	var scanned, segmentsScanned, rebuilt, corrupt int
	var bytesScanned, bytesTruncated int64
	byCause := map[string]int{}
	var examples []string
	for _, l := range m.Logs() {
		st := &l.recovery
		if st.segmentsScanned > 0 {
			scanned++
		}
		segmentsScanned += st.segmentsScanned
		if st.indexesRebuilt > 0 {
			rebuilt++
		}
		bytesScanned += st.bytesScanned
		bytesTruncated += st.bytesTruncated
		if !st.corrupt() {
			continue
		}
		corrupt++
		causes := st.causes()
		for _, c := range causes {
			byCause[c]++
		}
		if len(examples) < 10 {
			examples = append(examples, fmt.Sprintf("%s (%s)", l, strings.Join(causes, ", ")))
		}
	}
	attrs := []any{"dir", m.dir, "logs", len(m.logs), "clean_shutdown", clean, "duration", took.Round(time.Millisecond)}
	if !clean {
		attrs = append(attrs, "logs_scanned", scanned, "segments_scanned", segmentsScanned, "bytes_scanned", bytesScanned,
			"indexes_rebuilt", rebuilt)
	}
	if corrupt == 0 {
		m.logger.Info("opened log directory", attrs...)
		return
	}
	attrs = append(attrs, "corrupt_logs", corrupt)
	causes := make([]string, 0, len(byCause))
	for c := range byCause {
		causes = append(causes, c)
	}
	sort.Strings(causes)
	for _, c := range causes {
		attrs = append(attrs, c, byCause[c])
	}
	attrs = append(attrs, "bytes_truncated", bytesTruncated, "examples", strings.Join(examples, "; "))
	m.logger.Warn("opened log directory, recovering corrupt logs", attrs...)
}

// OpenFiles returns how many files the logs keep open: each segment its
// .log, and its .index and .timeindex once they hold entries.
func (m *Manager) OpenFiles() int {
	n := 0
	for _, l := range m.Logs() {
		n += openFiles(l.segmentList())
	}
	return n
}

// checkFileLimit warns when the open-file limit (RLIMIT_NOFILE) leaves too
// little room for the logs present: their files now, two more for each
// partition once its indexes hold entries, and a thousand for connections
// and the rest.
func (m *Manager) checkFileLimit() {
	limit, ok := openFileLimit()
	if !ok {
		return
	}
	open := m.OpenFiles()
	need := open + 2*len(m.logs) + 1000
	if uint64(need) <= limit {
		return
	}
	m.logger.Warn("the open-file limit is too low for the partitions in the log directory",
		"limit", limit, "partitions", len(m.logs), "open_files", open, "needed", need,
		"hint", "each partition keeps one file open per segment (.log), two more (.index, .timeindex) once it holds data, "+
			"and every client connection is one more; raise the limit (ulimit -n, LimitNOFILE= in systemd) to at least the needed count")
}

// SetRecoveryThreads changes num.recovery.threads.per.data.dir: how many
// logs are closed in parallel at shutdown (and opened at the next start,
// when the configuration says so there too).
func (m *Manager) SetRecoveryThreads(n int) { m.recoveryThreads.Store(int64(n)) }

// threads is how many logs are opened or closed at once: RecoveryThreads,
// at most the cores.
func (m *Manager) threads(logs int) int {
	n := int(m.recoveryThreads.Load())
	if n <= 0 || n > runtime.GOMAXPROCS(0) {
		n = runtime.GOMAXPROCS(0)
	}
	return max(min(n, logs), 1)
}

// eachParallel runs fn for every log, on m.threads goroutines.
func (m *Manager) eachParallel(logs []*Log, fn func(*Log)) {
	work := make(chan *Log)
	var wg sync.WaitGroup
	for range m.threads(len(logs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l := range work {
				fn(l)
			}
		}()
	}
	for _, l := range logs {
		work <- l
	}
	close(work)
	wg.Wait()
}

func (m *Manager) closeLogs() {
	for _, l := range m.logs {
		l.Close()
	}
}

// readCheckpoint reads a data-dir checkpoint; a corrupt one is logged and
// ignored, which costs a full recovery but trusts nothing.
func (m *Manager) readCheckpoint(name string) map[TopicPartition]int64 {
	offsets, err := ReadOffsetCheckpoint(m.fs, filepath.Join(m.dir, name))
	if err != nil {
		m.logger.Warn("ignoring unreadable checkpoint", "file", name, "err", err)
		return map[TopicPartition]int64{}
	}
	return offsets
}

func (m *Manager) configFor(topic string) Config {
	if m.opts.ConfigFor != nil {
		return m.opts.ConfigFor(topic)
	}
	return m.opts.Default
}

// checkpoints are the data directory's checkpoint files, as read at open.
type checkpoints struct {
	recoveryPoints, logStarts, cleanerPoints, highWatermarks map[TopicPartition]int64
}

// offset returns tp's entry in one checkpoint, or -1.
func offset(checkpoint map[TopicPartition]int64, tp TopicPartition) int64 {
	if o, ok := checkpoint[tp]; ok {
		return o
	}
	return -1
}

func (m *Manager) openAll(tps []TopicPartition, cp checkpoints, clean bool) error {
	work := make(chan TopicPartition)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range m.threads(len(tps)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tp := range work {
				l, err := OpenLog(m.fs, filepath.Join(m.dir, tp.String()), m.configFor(tp.Topic), LogOptions{
					Logger: m.logger, Now: m.now, RecoveryPoint: cp.recoveryPoints[tp], LogStartOffset: offset(cp.logStarts, tp),
					CleanShutdown: clean, CleanerCheckpoint: cp.cleanerPoints[tp], HighWatermark: offset(cp.highWatermarks, tp),
					DecompressionBudget: m.opts.DecompressionBudget, summarized: true, rolled: m.queueRolled,
				})
				if err != nil && tooManyFiles(err) {
					limit, _ := openFileLimit()
					err = fmt.Errorf("%w (the open-file limit, RLIMIT_NOFILE, is %d for %d partitions: raise it, see the README)", err, limit, len(tps))
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					m.logs[tp] = l
				}
				mu.Unlock()
			}
		}()
	}
	for _, tp := range tps {
		work <- tp
	}
	close(work)
	wg.Wait()
	if len(errs) > 10 {
		errs = append(errs[:10], fmt.Errorf("and %d more", len(errs)-10))
	}
	return errors.Join(errs...)
}

// Dir returns the data directory.
func (m *Manager) Dir() string { return m.dir }

// Log returns a partition's log.
func (m *Manager) Log(topic string, partition int32) (*Log, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	l, ok := m.logs[TopicPartition{topic, partition}]
	return l, ok
}

// Logs returns every log, by topic and partition.
func (m *Manager) Logs() []*Log {
	m.mu.RLock()
	out := make([]*Log, 0, len(m.logs))
	for _, l := range m.logs {
		out = append(out, l)
	}
	m.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].topic != out[j].topic {
			return out[i].topic < out[j].topic
		}
		return out[i].partition < out[j].partition
	})
	return out
}

// ValidTopicName checks Kafka's rules for topic names, which keep partition
// directory names safe: 1 to 249 characters of [a-zA-Z0-9._-], not "." or
// "..".
func ValidTopicName(topic string) error {
	if topic == "" || topic == "." || topic == ".." || len(topic) > 249 {
		return fmt.Errorf("storage: invalid topic name %q", topic)
	}
	for _, c := range topic {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("storage: invalid character %q in topic name %q", c, topic)
		}
	}
	return nil
}

// GetOrCreate returns a partition's log, creating its directory and first
// segment with cfg if it does not exist. An existing log keeps its
// configuration (use SetConfig).
func (m *Manager) GetOrCreate(topic string, partition int32, cfg Config) (*Log, error) {
	if err := ValidTopicName(topic); err != nil {
		return nil, err
	}
	if partition < 0 {
		return nil, fmt.Errorf("storage: invalid partition %d", partition)
	}
	tp := TopicPartition{topic, partition}
	if l, ok := m.Log(topic, partition); ok {
		return l, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if l, ok := m.logs[tp]; ok {
		return l, nil
	}
	l, err := OpenLog(m.fs, filepath.Join(m.dir, tp.String()), cfg, LogOptions{
		Logger: m.logger, Now: m.now, LogStartOffset: -1, HighWatermark: -1, DecompressionBudget: m.opts.DecompressionBudget,
		rolled: m.queueRolled,
	})
	if err != nil {
		return nil, err
	}
	// The new directory is synced into the data directory by the log's
	// first flush (unflushedParent): an empty partition a crash forgets
	// loses nothing, and creating many partitions costs no fsync each.
	m.logs[tp] = l
	m.logger.Info("created log", "topic", topic, "partition", partition)
	return l, nil
}

// Delete deletes a partition's log as Kafka does: its directory is renamed
// "<topic>-<partition>.<unique>-delete" at once (so a new log of the same
// name can be created), the log stops accepting writes, and its files are
// closed and removed after file.delete.delay.ms, so regions already handed
// out stay readable. A missing log is not an error.
func (m *Manager) Delete(topic string, partition int32) error {
	tp := TopicPartition{topic, partition}
	m.mu.Lock()
	l, ok := m.logs[tp]
	if !ok {
		m.mu.Unlock()
		return nil
	}
	delete(m.logs, tp)
	m.mu.Unlock()

	var unique [16]byte
	rand.Read(unique[:])
	newDir := filepath.Join(m.dir, fmt.Sprintf("%s.%s-delete", tp, hex.EncodeToString(unique[:])))
	if err := l.markDeleted(func(oldDir string) error {
		if err := m.fs.Rename(oldDir, newDir); err != nil {
			return err
		}
		return vfs.SyncDir(m.fs, m.dir)
	}, newDir); err != nil {
		return fmt.Errorf("storage: deleting %s: %w", tp, err)
	}
	// No roll can follow: the flusher need not sync a deleted log.
	m.rollMu.Lock()
	delete(m.rolled.logs, l)
	m.rollMu.Unlock()
	m.logger.Info("deleted log", "topic", topic, "partition", partition, "dir", filepath.Base(newDir))
	remove := func() {
		if err := l.Close(); err != nil {
			m.logger.Warn("closing deleted log", "dir", newDir, "err", err)
		}
		if err := m.fs.RemoveAll(newDir); err != nil {
			m.logger.Warn("removing deleted log", "dir", newDir, "err", err)
		}
	}
	delay := time.Duration(l.Config().FileDeleteDelayMs) * time.Millisecond
	if delay <= 0 {
		remove()
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deleting[l] = time.AfterFunc(delay, func() {
		m.mu.Lock()
		_, ok := m.deleting[l]
		delete(m.deleting, l)
		m.mu.Unlock()
		if ok {
			remove()
		}
	})
	return nil
}

// markDeleted stops writes to the log and moves its directory with rename.
func (l *Log) markDeleted(rename func(oldDir string) error, newDir string) error {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	l.snapshots.fileMu.Lock()
	defer l.snapshots.fileMu.Unlock()
	l.commit.syncMu.Lock()
	defer l.commit.syncMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := rename(l.mu.dir); err != nil {
		return err
	}
	l.mu.dir = newDir
	l.mu.deleted = true
	return nil
}

// CheckpointRecoveryPoints writes recovery-point-offset-checkpoint,
// log-start-offset-checkpoint and cleaner-offset-checkpoint for every log.
func (m *Manager) CheckpointRecoveryPoints() error {
	logs := m.Logs()
	recovery := make(map[TopicPartition]int64, len(logs))
	starts := make(map[TopicPartition]int64, len(logs))
	for _, l := range logs {
		tp := TopicPartition{l.topic, l.partition}
		recovery[tp] = l.RecoveryPoint()
		starts[tp] = l.LogStartOffset()
	}
	m.checkpointMu.Lock()
	defer m.checkpointMu.Unlock()
	return errors.Join(
		WriteOffsetCheckpoint(m.fs, filepath.Join(m.dir, RecoveryPointCheckpointFile), recovery),
		WriteOffsetCheckpoint(m.fs, filepath.Join(m.dir, LogStartOffsetCheckpointFile), starts),
		m.writeCleanerCheckpointLocked(logs),
	)
}

// CheckpointHighWatermarks writes replication-offset-checkpoint: the high
// watermark of every log whose replica set one (Log.SetHighWatermark), as
// Kafka's ReplicaManager writes it every
// replica.high.watermark.checkpoint.interval.ms and at shutdown, so that a
// restarted replica knows how far its log was committed. Without it, a
// restarted leader would count everything it recovered as committed,
// records no follower has included.
func (m *Manager) CheckpointHighWatermarks() error {
	logs := m.Logs()
	hws := make(map[TopicPartition]int64, len(logs))
	for _, l := range logs {
		if hw, ok := l.HighWatermark(); ok {
			hws[TopicPartition{l.topic, l.partition}] = hw
		}
	}
	m.checkpointMu.Lock()
	defer m.checkpointMu.Unlock()
	return WriteOffsetCheckpoint(m.fs, filepath.Join(m.dir, HighWatermarkCheckpointFile), hws)
}

// EnforceRetention applies retention to every log; failures are logged.
func (m *Manager) EnforceRetention(now time.Time) {
	for _, l := range m.Logs() {
		if _, err := l.EnforceRetention(now); err != nil && !errors.Is(err, ErrLogOffline) {
			m.logger.Warn("retention failed", "log", l.String(), "err", err)
		}
	}
}

// FlushDue flushes every log whose flush.ms has passed since its last
// flush.
func (m *Manager) FlushDue(now time.Time) {
	for _, l := range m.Logs() {
		cfg := l.cfg.Load()
		if cfg.FlushMs == math.MaxInt64 || now.UnixMilli()-l.lastFlushMs.Load() < cfg.FlushMs {
			continue
		}
		if err := l.Flush(l.LogEndOffset()); err != nil && !errors.Is(err, ErrLogOffline) && !errors.Is(err, ErrClosed) {
			m.logger.Warn("scheduled flush failed", "log", l.String(), "err", err)
		}
	}
}

// Start runs the background loop: retention every RetentionCheckInterval,
// flush.ms every FlushCheckInterval, checkpoints every CheckpointInterval,
// the high watermarks every HighWatermarkCheckpointInterval;
// beside it the roll flusher, which makes rolled segments durable and
// moves the recovery point to the active segment (see FlushRolled); and,
// unless DisableCleaner, the log cleaner's loop (see CleanLogs). Close
// stops them.
func (m *Manager) Start() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stop != nil || m.closed {
		return
	}
	m.stop, m.done = make(chan struct{}), make(chan struct{})
	interval := func(d, def time.Duration) time.Duration {
		if d <= 0 {
			return def
		}
		return d
	}
	if !m.opts.DisableCleaner {
		m.cleanerDone = make(chan struct{})
		go m.cleanerLoop(m.stop, m.cleanerDone)
	}
	m.flusherDone = make(chan struct{})
	go m.flushRolledLoop(m.stop, m.flusherDone)
	retention := time.NewTicker(interval(m.opts.RetentionCheckInterval, 300*time.Second))
	flush := time.NewTicker(interval(m.opts.FlushCheckInterval, time.Second))
	checkpoint := time.NewTicker(interval(m.opts.CheckpointInterval, 60*time.Second))
	hwCheckpoint := time.NewTicker(interval(m.opts.HighWatermarkCheckpointInterval, 5*time.Second))
	go func() {
		defer close(m.done)
		defer retention.Stop()
		defer flush.Stop()
		defer checkpoint.Stop()
		defer hwCheckpoint.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-retention.C:
				m.EnforceRetention(m.now())
			case <-flush.C:
				m.FlushDue(m.now())
			case <-checkpoint.C:
				if err := m.CheckpointRecoveryPoints(); err != nil {
					m.logger.Warn("writing checkpoints", "err", err)
				}
			case <-hwCheckpoint.C:
				if err := m.CheckpointHighWatermarks(); err != nil {
					m.logger.Warn("writing the high-watermark checkpoint", "err", err)
				}
			}
		}
	}()
}

// Close stops the background loop, finishes delayed deletions, flushes and
// closes every log, writes the checkpoints (the high watermarks' too) and, if all of that succeeded,
// the clean-shutdown marker that lets the next open skip recovery.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	stop, done, cleanerDone, flusherDone := m.stop, m.done, m.cleanerDone, m.flusherDone
	deleting := m.deleting
	m.deleting = map[*Log]*time.Timer{}
	m.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
		if cleanerDone != nil {
			<-cleanerDone
		}
		<-flusherDone
	}
	for l, t := range deleting {
		t.Stop()
		l.Close()
		dir := l.Dir()
		if err := m.fs.RemoveAll(dir); err != nil {
			m.logger.Warn("removing deleted log", "dir", dir, "err", err)
		}
	}
	var errs []error
	var errMu sync.Mutex
	addErr := func(err error) {
		if err != nil {
			errMu.Lock()
			errs = append(errs, err)
			errMu.Unlock()
		}
	}
	logs := m.Logs()
	m.eachParallel(logs, func(l *Log) { addErr(l.Flush(l.LogEndOffset())) })
	addErr(m.CheckpointRecoveryPoints())
	addErr(m.CheckpointHighWatermarks())
	m.eachParallel(logs, func(l *Log) {
		addErr(l.Close())
		addErr(l.Offline())
	})
	if len(errs) == 0 {
		var marker []byte
		if e := m.brokerEpoch.Load(); e >= 0 {
			marker = fmt.Appendf(nil, `{"version":0,"broker_epoch":%d}`, e)
		}
		if err := vfs.WriteFileAtomic(m.fs, filepath.Join(m.dir, CleanShutdownFile), marker); err != nil {
			errs = append(errs, err)
		}
	}
	m.logger.Info("closed log directory", "dir", m.dir, "logs", len(logs), "clean", len(errs) == 0)
	return errors.Join(errs...)
}

// CleanShutdownBrokerEpoch is the broker epoch written in the clean-shutdown
// marker the directory was opened with: the epoch the broker had when it
// last stopped cleanly, for its next registration's PreviousBrokerEpoch
// (KIP-966). -1 after an unclean shutdown, or when the marker held none.
func (m *Manager) CleanShutdownBrokerEpoch() int64 { return m.cleanShutdownBrokerEpoch }

// SetBrokerEpoch sets the broker epoch that a clean Close writes in the
// clean-shutdown marker (Kafka's {"version":0,"broker_epoch":N}).
func (m *Manager) SetBrokerEpoch(epoch int64) { m.brokerEpoch.Store(epoch) }

// readCleanShutdownEpoch reads the broker epoch of a clean-shutdown marker,
// -1 when it holds none.
func readCleanShutdownEpoch(fs vfs.FS, path string) int64 {
	data, err := vfs.ReadFile(fs, path)
	if err != nil || len(data) == 0 {
		return -1
	}
	var marker struct {
		BrokerEpoch *int64 `json:"broker_epoch"`
	}
	if json.Unmarshal(data, &marker) != nil || marker.BrokerEpoch == nil {
		return -1
	}
	return *marker.BrokerEpoch
}
