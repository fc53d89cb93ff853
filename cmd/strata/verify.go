package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/verify"
)

// strata verify: the Jepsen-style workload and checker of internal/verify.
// This file parses flags, runs the package and prints; the package does
// the rest.

// verify's exit codes: 0 valid, 1 anomalies found, 2 could not run.
const (
	exitAnomalies = 1
	exitNoRun     = 2
)

type verifyFlags struct {
	duration          time.Duration
	records           int64
	topic             string
	partitions        int32
	replicationFactor int16
	producers         int
	assigned          int
	group             int
	rate              int
	acks              string
	idempotent        bool
	transactional     bool
	abortRate         float64
	txnRecords        int
	deliveryTimeout   time.Duration
	drainTimeout      time.Duration
	history           string
	check             string
	keepTopic         bool
	quiet             bool
}

func verifyCommand() *cobra.Command {
	var vf verifyFlags
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check a cluster for lost, duplicated and reordered records (a Jepsen-style workload and checker)",
		Long: `Run producers and consumers against any Kafka-protocol cluster, record every
send, acknowledgement and record read, read everything back, and check the
history for the anomalies of Jepsen's Kafka queue workload: lost writes,
duplicates, inconsistent offsets, per-producer order, nonmonotonic polls and
skipped offsets within a consumer's assignment.

With --transactional the producers send in transactions that they commit
or abort at random (--abort-rate), every consumer reads committed records
only, and the group consumers become a copy stage: each reads the topic and
writes what it read to the output topic <topic>-out in one transaction with
its offset commit. The check then also reports aborted reads, intermediate
reads (a record read before its producer asked to commit), and copies lost,
duplicated or out of order.

The run creates its own topic (replication factor 3, or the number of
brokers when fewer; min.insync.replicas=2 with 3 or more) and deletes it
afterwards if the run is valid. Producers are idempotent with acks=all
unless told otherwise; consumers are assigned every partition directly
(--assigned-consumers) or share the topic in a group (--group-consumers).

Exit status: 0 when no anomaly was found, 1 when one was, 2 when the run
could not be made or checked.`,
		Example: `  strata verify --brokers host1:9092,host2:9092,host3:9092 --duration 5m
  strata verify --records 100000 --rate 0 --history run.json
  strata verify --check run.json`,
		Args: cobra.NoArgs,
	}
	o := addClientFlags(cmd)
	f := cmd.Flags()
	f.DurationVar(&vf.duration, "duration", 30*time.Second, "how long to produce (unless --records is given)")
	f.Int64Var(&vf.records, "records", 0, "produce this many records in all, then stop (instead of --duration)")
	f.StringVar(&vf.topic, "topic", "", "the topic to create; it must not exist (default strata-verify-<run id>)")
	f.Int32Var(&vf.partitions, "partitions", 6, "partitions of the topic")
	f.Int16Var(&vf.replicationFactor, "replication-factor", 0, "replication factor of the topic (default 3, or the number of brokers when fewer)")
	f.IntVar(&vf.producers, "producers", 3, "producers, each a client with its own producer id")
	f.IntVar(&vf.assigned, "assigned-consumers", 2, "consumers assigned every partition directly, reading from the start")
	f.IntVar(&vf.group, "group-consumers", 2, "consumers sharing the topic in one consumer group")
	f.IntVar(&vf.rate, "rate", 1000, "records per second over all producers (0: as fast as the cluster takes them)")
	f.StringVar(&vf.acks, "acks", "all", "producer acks: 1 or all")
	f.BoolVar(&vf.idempotent, "idempotent", true, "use the idempotent producer (--idempotent=false lets retries append duplicates)")
	f.BoolVar(&vf.transactional, "transactional", false, "transactional producers, read_committed consumers, and the group consumers as a transactional copy stage")
	f.Float64Var(&vf.abortRate, "abort-rate", 0.2, "with --transactional: the fraction of transactions the producers abort on purpose")
	f.IntVar(&vf.txnRecords, "txn-records", 10, "with --transactional: the most records a transaction holds (each holds 1 to this many)")
	f.DurationVar(&vf.deliveryTimeout, "delivery-timeout", 30*time.Second, "how long a record may wait for its acknowledgement before the producer gives up on it")
	f.DurationVar(&vf.drainTimeout, "drain-timeout", 10*time.Second, "after producing: the longest wait for outstanding acknowledgements, for consumers to catch up, and between records of the final read")
	f.StringVar(&vf.history, "history", "", "write the whole history (every send, acknowledgement and poll) as JSON to this file")
	f.StringVar(&vf.check, "check", "", "check a history written by --history, instead of running")
	f.BoolVar(&vf.keepTopic, "keep-topic", false, "keep the topic after a valid run (an invalid run always keeps it)")
	f.BoolVar(&vf.quiet, "quiet", false, "no progress lines on stderr")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: exitNoRun, err: err} })
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		res, err := runVerifyCommand(cmd, o, &vf)
		if err != nil {
			return &exitError{code: exitNoRun, err: err}
		}
		w := cmd.OutOrStdout()
		if o.format == "json" {
			err = writeJSON(w, res)
		} else {
			err = res.WriteText(w)
		}
		if err != nil {
			return &exitError{code: exitNoRun, err: err}
		}
		if !res.Valid {
			return &exitError{code: exitAnomalies, err: fmt.Errorf("verify found %d anomalies (%s); topic %s kept", res.Total(), res.Summary(), res.Topic)}
		}
		return nil
	}
	return cmd
}

// runVerifyCommand checks the flags, then either checks a saved history or
// runs the workload and checks what it saw.
func runVerifyCommand(cmd *cobra.Command, o *clientOptions, vf *verifyFlags) (*verify.Result, error) {
	if vf.check != "" {
		return checkSavedHistory(vf.check)
	}
	cfg, err := verifyConfig(cmd, o, vf)
	if err != nil {
		return nil, err
	}
	if err := o.reachable(cmd.Context()); err != nil {
		return nil, err
	}
	// The first interrupt ends the producing and lets the run finish and
	// check what it saw; a second one kills the process.
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()
	h, res, err := verify.Verify(ctx, cfg)
	if h != nil && vf.history != "" {
		if werr := h.WriteFile(vf.history); werr != nil {
			return nil, errors.Join(err, werr)
		}
	}
	return res, err
}

func verifyConfig(cmd *cobra.Command, o *clientOptions, vf *verifyFlags) (verify.Config, error) {
	flags := cmd.Flags()
	switch {
	case flags.Changed("records") && flags.Changed("duration"):
		return verify.Config{}, errors.New("give --records or --duration, not both")
	case flags.Changed("records") && vf.records < 1:
		return verify.Config{}, fmt.Errorf("--records must be at least 1, not %d", vf.records)
	case !flags.Changed("records") && vf.duration <= 0:
		return verify.Config{}, fmt.Errorf("--duration must be positive, not %s", vf.duration)
	case vf.partitions < 1:
		return verify.Config{}, fmt.Errorf("--partitions must be at least 1, not %d", vf.partitions)
	case vf.replicationFactor < 0:
		return verify.Config{}, fmt.Errorf("--replication-factor must not be negative, not %d", vf.replicationFactor)
	case vf.producers < 1:
		return verify.Config{}, fmt.Errorf("--producers must be at least 1, not %d", vf.producers)
	case vf.assigned < 0 || vf.group < 0:
		return verify.Config{}, errors.New("--assigned-consumers and --group-consumers must not be negative")
	case vf.rate < 0:
		return verify.Config{}, fmt.Errorf("--rate must not be negative, not %d", vf.rate)
	case vf.abortRate < 0 || vf.abortRate > 1:
		return verify.Config{}, fmt.Errorf("--abort-rate must be within 0 and 1, not %v", vf.abortRate)
	case vf.txnRecords < 1:
		return verify.Config{}, fmt.Errorf("--txn-records must be at least 1, not %d", vf.txnRecords)
	case (flags.Changed("abort-rate") || flags.Changed("txn-records")) && !vf.transactional:
		return verify.Config{}, errors.New("--abort-rate and --txn-records need --transactional")
	case vf.deliveryTimeout <= 0 || vf.drainTimeout <= 0:
		return verify.Config{}, errors.New("--delivery-timeout and --drain-timeout must be positive")
	}
	var acks kgo.Acks
	switch vf.acks {
	case "all", "-1":
		acks = kgo.AllISRAcks()
	case "1":
		acks = kgo.LeaderAck()
		if vf.transactional {
			return verify.Config{}, errors.New("the transactional producer needs --acks all")
		}
		if vf.idempotent {
			return verify.Config{}, errors.New("the idempotent producer needs --acks all; add --idempotent=false for --acks 1")
		}
	case "0":
		return verify.Config{}, errors.New("--acks 0 gets no acknowledgements (and no offsets) to check; use 1 or all")
	default:
		return verify.Config{}, fmt.Errorf("--acks %q: want 1 or all", vf.acks)
	}
	cfg := verify.Config{
		Brokers: o.seeds(),
		ClientOpts: []kgo.Opt{
			kgo.DialTimeout(o.dialTimeout),
			kgo.RetryTimeout(o.timeout),
		},
		Topic:             vf.topic,
		Partitions:        vf.partitions,
		ReplicationFactor: vf.replicationFactor,
		Producers:         vf.producers,
		AssignedConsumers: vf.assigned,
		GroupConsumers:    vf.group,
		Rate:              vf.rate,
		Acks:              acks,
		Idempotent:        vf.idempotent,
		Transactional:     vf.transactional,
		AbortRate:         vf.abortRate,
		TxnRecords:        vf.txnRecords,
		DeliveryTimeout:   vf.deliveryTimeout,
		RequestTimeout:    o.timeout,
		DrainTimeout:      vf.drainTimeout,
		KeepTopic:         vf.keepTopic,
	}
	if vf.abortRate == 0 {
		cfg.AbortRate = -1 // none; 0 is the package's default
	}
	if flags.Changed("records") {
		cfg.Records = vf.records
	} else {
		cfg.Duration = vf.duration
	}
	if !vf.quiet {
		cfg.Progress = cmd.ErrOrStderr()
	}
	return cfg, nil
}

func checkSavedHistory(path string) (*verify.Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h, err := verify.ReadHistory(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return verify.Check(h), nil
}
