package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The benchmark of issue 3: a client process separate from the broker,
// franz-go, 100-byte records, 6 partitions, replication factor 1. It
// reports throughput, latency percentiles and, given the broker's pid, the
// broker's CPU time per million records from /proc/<pid>/stat. With
// --kfake the same run is repeated against franz-go's kfake in a separate
// `strata bench kfake-server` process, whose CPU is read the same way, so
// the two are compared in one run. kfake is linked only into a binary built
// with -tags kfake (bench_kfake.go): the release binary does not carry a
// fake broker.

type benchFlags struct {
	records     int
	recordSize  int
	partitions  int32
	topic       string
	keepTopic   bool
	linger      time.Duration
	acks        string
	brokerPID   int
	kfake       bool
	targetRate  int
	duration    time.Duration
	warmup      time.Duration
	compression string
}

func benchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmark a cluster (produce, consume, end-to-end latency), optionally against kfake",
		Long: `Benchmark a cluster with franz-go from this process: 100-byte records into a
new topic of 6 partitions and replication factor 1 (deleted afterwards).

Reports records/s, MB/s (10^6 bytes of record values), latency percentiles
and, with --broker-pid, the broker's CPU seconds (user+system, from
/proc/PID/stat) per million records and per GB. --kfake repeats the run
against franz-go's in-memory fake broker, started as a separate
'strata bench kfake-server' process so its CPU is measured the same way,
and prints both; it needs a strata built with -tags kfake.`,
	}
	o := addClientFlags(cmd)
	var bf benchFlags
	f := cmd.PersistentFlags()
	f.IntVar(&bf.records, "records", 1_000_000, "records to produce or consume (e2e: 0 runs for --duration)")
	f.IntVar(&bf.recordSize, "record-size", 100, "bytes per record value")
	f.Int32Var(&bf.partitions, "partitions", 6, "partitions of the benchmark topic")
	f.StringVar(&bf.topic, "topic", "", "topic to use (default: a new strata-bench-* topic)")
	f.BoolVar(&bf.keepTopic, "keep-topic", false, "do not delete the benchmark topic afterwards")
	f.StringVar(&bf.acks, "acks", "all", "producer acks: 0, 1 or all")
	f.StringVar(&bf.compression, "compression", "none", "batch compression: none, gzip, snappy, lz4 or zstd")
	f.IntVar(&bf.brokerPID, "broker-pid", 0, "the broker's process id, to report its CPU time")
	f.BoolVar(&bf.kfake, "kfake", false, "also run against franz-go's kfake (a separate process) as the baseline")
	cmd.AddCommand(
		benchModeCommand(o, &bf, "produce", "Produce --records records as fast as the cluster takes them", 10*time.Millisecond),
		benchModeCommand(o, &bf, "consume", "Write --records records, then time reading them back", 10*time.Millisecond),
		benchE2ECommand(o, &bf),
	)
	if kfakeServer := benchKfakeServerCommand(); kfakeServer != nil {
		cmd.AddCommand(kfakeServer)
	}
	return cmd
}

func benchModeCommand(o *clientOptions, bf *benchFlags, mode, short string, defaultLinger time.Duration) *cobra.Command {
	var linger time.Duration
	cmd := &cobra.Command{
		Use:   mode,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bf.linger = linger
			return runBench(cmd, o, bf, mode)
		},
	}
	cmd.Flags().DurationVar(&linger, "linger", defaultLinger, "producer linger")
	return cmd
}

func benchE2ECommand(o *clientOptions, bf *benchFlags) *cobra.Command {
	var linger time.Duration
	cmd := &cobra.Command{
		Use:   "e2e",
		Short: "Produce at --target-rate and measure produce-to-consume latency",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("records") {
				bf.records = 0
			}
			bf.linger = linger
			return runBench(cmd, o, bf, "e2e")
		},
	}
	f := cmd.Flags()
	f.DurationVar(&linger, "linger", 0, "producer linger")
	f.IntVar(&bf.targetRate, "target-rate", 10_000, "records per second (0: as fast as possible)")
	f.DurationVar(&bf.duration, "duration", 10*time.Second, "how long to produce, when --records is 0")
	f.DurationVar(&bf.warmup, "warmup", time.Second, "leave records produced in this first stretch out of the latencies")
	return cmd
}

// benchResult is one target's outcome.
type benchResult struct {
	Target        string         `json:"target"`
	Records       int            `json:"records"`
	Seconds       float64        `json:"seconds"`
	RecordsPerSec float64        `json:"records_per_sec"`
	MBPerSec      float64        `json:"mb_per_sec"`
	Latency       *latencyReport `json:"latency_ms,omitempty"`
	// LatencyOf says what Latency measures.
	LatencyOf            string   `json:"latency_of,omitempty"`
	BrokerCPUSeconds     *float64 `json:"broker_cpu_seconds,omitempty"`
	CPUSecondsPerMillion *float64 `json:"broker_cpu_seconds_per_million_records,omitempty"`
	CPUSecondsPerGB      *float64 `json:"broker_cpu_seconds_per_gb,omitempty"`
}

type latencyReport struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

type benchReport struct {
	Mode       string        `json:"mode"`
	RecordSize int           `json:"record_size"`
	Partitions int32         `json:"partitions"`
	TargetRate int           `json:"target_rate,omitempty"`
	Results    []benchResult `json:"results"`
}

func runBench(cmd *cobra.Command, o *clientOptions, bf *benchFlags, mode string) error {
	switch {
	case bf.recordSize < 8:
		return fmt.Errorf("--record-size must be at least 8 (the e2e timestamp), not %d", bf.recordSize)
	case bf.partitions < 1:
		return fmt.Errorf("--partitions must be at least 1, not %d", bf.partitions)
	case bf.records < 0:
		return fmt.Errorf("--records must not be negative, not %d", bf.records)
	case bf.records == 0 && mode != "e2e":
		return errors.New("--records must be at least 1")
	case bf.kfake && benchKfakeServerCommand() == nil:
		return errors.New("--kfake needs a strata built with the kfake baseline, which the release binary leaves out: go build -tags kfake -o strata ./cmd/strata")
	}
	if _, _, err := parseAcks(bf.acks); err != nil {
		return err
	}
	if _, err := parseCompression(bf.compression); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	rep := benchReport{Mode: mode, RecordSize: bf.recordSize, Partitions: bf.partitions, TargetRate: bf.targetRate}
	if mode != "e2e" {
		rep.TargetRate = 0
	}
	res, err := benchTarget(ctx, o, bf, mode, o.brokers, bf.brokerPID)
	if err != nil {
		return err
	}
	rep.Results = append(rep.Results, res)
	if bf.kfake {
		res, err := benchKfake(ctx, o, bf, mode)
		if err != nil {
			return fmt.Errorf("kfake baseline: %w", err)
		}
		rep.Results = append(rep.Results, res)
	}
	return printBenchReport(cmd.OutOrStdout(), o, rep)
}

// benchKfake runs the benchmark against a kfake-server child process.
func benchKfake(ctx context.Context, o *clientOptions, bf *benchFlags, mode string) (benchResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return benchResult{}, err
	}
	child := exec.CommandContext(ctx, exe, "bench", "kfake-server")
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		return benchResult{}, err
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		return benchResult{}, err
	}
	if err := child.Start(); err != nil {
		return benchResult{}, fmt.Errorf("starting kfake-server: %w", err)
	}
	defer func() {
		stdin.Close() // the server exits when its stdin closes
		_ = child.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return benchResult{}, fmt.Errorf("kfake-server did not report its address: %w", err)
	}
	addr := strings.TrimSpace(line)
	ko := *o
	ko.brokers = addr
	res, err := benchTarget(ctx, &ko, bf, mode, "kfake", child.Process.Pid)
	return res, err
}

// cpuSeconds reads a process's user+system CPU time from /proc/PID/stat.
// The kernel reports it in USER_HZ ticks, 100 per second on Linux.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the broker's CPU time: %w", err)
	}
	s := string(b)
	// The command name (field 2) is in parentheses and may hold spaces.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return float64(utime+stime) / 100, nil
}

// benchTarget creates the topic, runs one mode against brokers and
// measures the broker process's CPU around the timed part.
func benchTarget(ctx context.Context, o *clientOptions, bf *benchFlags, mode, label string, pid int) (benchResult, error) {
	adm, err := o.admin(ctx)
	if err != nil {
		return benchResult{}, err
	}
	defer adm.Close()
	topic := bf.topic
	if topic == "" {
		topic = fmt.Sprintf("strata-bench-%s-%d", mode, time.Now().UnixNano())
	}
	if err := ensureBenchTopic(ctx, o, adm, topic, bf.partitions); err != nil {
		return benchResult{}, err
	}
	if !bf.keepTopic && bf.topic == "" {
		defer func() {
			dctx, cancel := o.requestContext(context.WithoutCancel(ctx))
			defer cancel()
			_, _ = adm.DeleteTopics(dctx, topic)
		}()
	}
	var cpu0 float64
	measure := func() error {
		if pid == 0 {
			return nil
		}
		var err error
		cpu0, err = cpuSeconds(pid)
		return err
	}
	var run benchRun
	switch mode {
	case "produce":
		run, err = benchProduce(ctx, o, bf, topic, measure)
	case "consume":
		run, err = benchConsume(ctx, o, bf, topic, measure)
	case "e2e":
		run, err = benchE2E(ctx, o, bf, topic, measure)
	}
	if err != nil {
		return benchResult{}, err
	}
	res := run.result(label, bf.recordSize)
	if pid != 0 {
		cpu1, err := cpuSeconds(pid)
		if err != nil {
			return benchResult{}, err
		}
		used := cpu1 - cpu0
		perM := used / float64(run.records) * 1e6
		perGB := used / (float64(run.records) * float64(bf.recordSize)) * 1e9
		res.BrokerCPUSeconds, res.CPUSecondsPerMillion, res.CPUSecondsPerGB = &used, &perM, &perGB
	}
	return res, nil
}

func ensureBenchTopic(ctx context.Context, o *clientOptions, adm *kadm.Client, topic string, partitions int32) error {
	rctx, cancel := o.requestContext(ctx)
	defer cancel()
	md, err := adm.ListTopics(rctx, topic)
	if err != nil {
		return o.requestError("describing the benchmark topic", err)
	}
	if topicExists(md, topic) == nil {
		return nil
	}
	resp, err := adm.CreateTopic(rctx, partitions, 1, nil, topic)
	if err != nil {
		return fmt.Errorf("creating the benchmark topic %q: %s", topic, explainTopicError(err, resp.ErrMessage))
	}
	return nil
}

// benchRun is a timed run: records over elapsed, and latency samples.
type benchRun struct {
	records   int
	elapsed   time.Duration
	latencies []time.Duration
	latencyOf string
}

func (r benchRun) result(label string, recordSize int) benchResult {
	secs := r.elapsed.Seconds()
	res := benchResult{Target: label, Records: r.records, Seconds: secs}
	if secs > 0 {
		res.RecordsPerSec = float64(r.records) / secs
		res.MBPerSec = float64(r.records) * float64(recordSize) / secs / 1e6
	}
	if len(r.latencies) > 0 {
		slices.Sort(r.latencies)
		pct := func(q float64) float64 {
			i := int(q * float64(len(r.latencies)-1))
			return float64(r.latencies[i]) / float64(time.Millisecond)
		}
		res.Latency = &latencyReport{P50: pct(0.50), P90: pct(0.90), P99: pct(0.99), P999: pct(0.999), Max: pct(1)}
		res.LatencyOf = r.latencyOf
	}
	return res
}

func benchProducer(ctx context.Context, o *clientOptions, bf *benchFlags, topic string, linger time.Duration) (*kgo.Client, error) {
	acks, idempotent, _ := parseAcks(bf.acks)
	codec, _ := parseCompression(bf.compression)
	opts := []kgo.Opt{
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(acks),
		kgo.ProducerLinger(linger),
		kgo.ProducerBatchCompression(codec),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
	}
	if !idempotent {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	return o.client(ctx, opts...)
}

// benchProduce produces records as fast as they are taken; the latency of
// a record runs from Produce to its acknowledgement.
func benchProduce(ctx context.Context, o *clientOptions, bf *benchFlags, topic string, start func() error) (benchRun, error) {
	cl, err := benchProducer(ctx, o, bf, topic, bf.linger)
	if err != nil {
		return benchRun{}, err
	}
	defer cl.Close()
	value := make([]byte, bf.recordSize)
	lat := make([]time.Duration, bf.records)
	var done atomic.Int64
	var firstErr atomic.Pointer[error]
	promise := func(r *kgo.Record, err error) {
		if err != nil {
			firstErr.CompareAndSwap(nil, &err)
			return
		}
		lat[done.Add(1)-1] = time.Since(r.Timestamp)
	}
	if err := start(); err != nil {
		return benchRun{}, err
	}
	t0 := time.Now()
	for i := 0; i < bf.records && ctx.Err() == nil; i++ {
		cl.Produce(ctx, &kgo.Record{Value: value}, promise)
	}
	if err := cl.Flush(ctx); err != nil {
		return benchRun{}, err
	}
	elapsed := time.Since(t0)
	if p := firstErr.Load(); p != nil {
		return benchRun{}, fmt.Errorf("producing: %s", kafkaError(*p))
	}
	n := int(done.Load())
	return benchRun{records: n, elapsed: elapsed, latencies: lat[:n], latencyOf: "produce to acknowledgement"}, nil
}

// benchConsume writes the records (untimed), then times a fresh consumer
// reading them all; the latency is of each fetch request.
func benchConsume(ctx context.Context, o *clientOptions, bf *benchFlags, topic string, start func() error) (benchRun, error) {
	fill := *bf
	if _, err := benchProduce(ctx, o, &fill, topic, func() error { return nil }); err != nil {
		return benchRun{}, fmt.Errorf("writing the records to consume: %w", err)
	}
	var hook fetchLatencyHook
	cl, err := o.client(ctx,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.WithHooks(&hook),
	)
	if err != nil {
		return benchRun{}, err
	}
	defer cl.Close()
	if err := start(); err != nil {
		return benchRun{}, err
	}
	t0 := time.Now()
	n := 0
	for n < bf.records {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return benchRun{}, ctx.Err()
		}
		if err := fetches.Err0(); err != nil {
			return benchRun{}, fmt.Errorf("consuming: %s", kafkaError(err))
		}
		n += fetches.NumRecords()
	}
	elapsed := time.Since(t0)
	hook.stop.Store(true)
	return benchRun{records: n, elapsed: elapsed, latencies: hook.snapshot(), latencyOf: "fetch request round trip"}, nil
}

// fetchLatencyHook records each fetch request's round trip. It runs on
// franz-go's connection goroutines.
type fetchLatencyHook struct {
	mu        sync.Mutex
	latencies []time.Duration // guarded by mu
	stop      atomic.Bool
}

func (h *fetchLatencyHook) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key != 1 || h.stop.Load() || e2e.Err() != nil {
		return
	}
	h.mu.Lock()
	h.latencies = append(h.latencies, e2e.DurationE2E())
	h.mu.Unlock()
}

func (h *fetchLatencyHook) snapshot() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.latencies)
}

// benchE2E produces at the target rate while consuming in the same
// process; each value starts with its send time (nanoseconds since the
// run began, on the monotonic clock), so latency is send to receive.
func benchE2E(ctx context.Context, o *clientOptions, bf *benchFlags, topic string, start func() error) (benchRun, error) {
	adm, err := o.admin(ctx)
	if err != nil {
		return benchRun{}, err
	}
	defer adm.Close()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return benchRun{}, fmt.Errorf("listing offsets: %s", kafkaError(err))
	}
	at := map[int32]kgo.Offset{}
	ends.Each(func(lo kadm.ListedOffset) { at[lo.Partition] = kgo.NewOffset().At(lo.Offset) })
	consumer, err := o.client(ctx,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: at}),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	if err != nil {
		return benchRun{}, err
	}
	defer consumer.Close()
	producer, err := benchProducer(ctx, o, bf, topic, bf.linger)
	if err != nil {
		return benchRun{}, err
	}
	defer producer.Close()

	if err := start(); err != nil {
		return benchRun{}, err
	}
	t0 := time.Now()
	var sent atomic.Int64
	var produceErr atomic.Pointer[error]
	producing := make(chan struct{})
	go func() {
		defer close(producing)
		promise := func(_ *kgo.Record, err error) {
			if err != nil {
				produceErr.CompareAndSwap(nil, &err)
			}
		}
		for i := 0; ctx.Err() == nil && produceErr.Load() == nil; i++ {
			if bf.records > 0 && i == bf.records {
				return
			}
			if bf.targetRate > 0 {
				// Pace by the schedule, not by the previous send, so a late
				// record does not delay the ones after it.
				offset := time.Duration(float64(i) / float64(bf.targetRate) * float64(time.Second))
				if bf.records == 0 && offset >= bf.duration {
					return
				}
				if wait := time.Until(t0.Add(offset)); wait > 0 {
					time.Sleep(wait)
				}
			} else if bf.records == 0 && time.Since(t0) >= bf.duration {
				return
			}
			v := make([]byte, bf.recordSize)
			binary.BigEndian.PutUint64(v, uint64(time.Since(t0)))
			producer.Produce(ctx, &kgo.Record{Value: v}, promise)
			sent.Add(1)
		}
	}()

	var lat []time.Duration
	received := 0
	warmup := int64(bf.warmup)
	lastProgress := time.Now()
	for {
		select {
		case <-producing:
			if int64(received) >= sent.Load() {
				if p := produceErr.Load(); p != nil {
					return benchRun{}, fmt.Errorf("producing: %s", kafkaError(*p))
				}
				return benchRun{records: received, elapsed: time.Since(t0), latencies: lat, latencyOf: "produce to consume"}, nil
			}
			if time.Since(lastProgress) > o.timeout {
				return benchRun{}, fmt.Errorf("consumer stalled: read %d of %d records", received, sent.Load())
			}
		default:
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fetches := consumer.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return benchRun{}, ctx.Err()
		}
		if p := produceErr.Load(); p != nil {
			return benchRun{}, fmt.Errorf("producing: %s", kafkaError(*p))
		}
		now := int64(time.Since(t0))
		if fetches.NumRecords() > 0 {
			lastProgress = time.Now()
		}
		fetches.EachRecord(func(r *kgo.Record) {
			received++
			sentAt := int64(binary.BigEndian.Uint64(r.Value))
			if sentAt >= warmup {
				lat = append(lat, time.Duration(now-sentAt))
			}
		})
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				ferr = err
			}
		})
		if ferr != nil {
			return benchRun{}, fmt.Errorf("consuming: %s", kafkaError(ferr))
		}
	}
}

func printBenchReport(w io.Writer, o *clientOptions, rep benchReport) error {
	if o.format == "json" {
		return writeJSON(w, rep)
	}
	fmt.Fprintf(w, "bench %s: %d-byte records, %d partitions", rep.Mode, rep.RecordSize, rep.Partitions)
	if rep.TargetRate > 0 {
		fmt.Fprintf(w, ", target %d records/s", rep.TargetRate)
	}
	fmt.Fprintln(w)
	if len(rep.Results) > 0 && rep.Results[0].LatencyOf != "" {
		fmt.Fprintf(w, "latency (ms) is %s\n", rep.Results[0].LatencyOf)
	}
	fmt.Fprintln(w)
	t := newTable(w, "TARGET", "RECORDS", "SECONDS", "RECORDS/S", "MB/S", "P50", "P90", "P99", "P99.9", "BROKER-CPU-S", "CPU-S/M-RECORDS", "CPU-S/GB")
	for _, r := range rep.Results {
		row := []any{r.Target, r.Records, fmt.Sprintf("%.2f", r.Seconds), fmt.Sprintf("%.0f", r.RecordsPerSec), fmt.Sprintf("%.1f", r.MBPerSec)}
		if l := r.Latency; l != nil {
			row = append(row, ms(l.P50), ms(l.P90), ms(l.P99), ms(l.P999))
		} else {
			row = append(row, "-", "-", "-", "-")
		}
		if r.BrokerCPUSeconds != nil {
			row = append(row, fmt.Sprintf("%.2f", *r.BrokerCPUSeconds), fmt.Sprintf("%.2f", *r.CPUSecondsPerMillion), fmt.Sprintf("%.2f", *r.CPUSecondsPerGB))
		} else {
			row = append(row, "-", "-", "-")
		}
		t.row(row...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(rep.Results) == 2 {
		a, b := rep.Results[0], rep.Results[1]
		if b.RecordsPerSec > 0 {
			fmt.Fprintf(w, "\n%s/%s: throughput %.2fx", a.Target, b.Target, a.RecordsPerSec/b.RecordsPerSec)
			if a.CPUSecondsPerMillion != nil && b.CPUSecondsPerMillion != nil && *b.CPUSecondsPerMillion > 0 {
				fmt.Fprintf(w, ", broker CPU per record %.2fx", *a.CPUSecondsPerMillion / *b.CPUSecondsPerMillion)
			}
			fmt.Fprintln(w)
		}
	}
	return nil
}

func ms(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
