package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
)

type produceFlags struct {
	keySeparator string
	headers      []string
	acks         string
	compression  string
	partition    int32
	autoCreate   bool
	verbose      bool
}

// producedRecord is one written record in produce's report.
type producedRecord struct {
	Partition int32 `json:"partition"`
	// Offset is -1 with --acks 0: the broker does not say.
	Offset int64 `json:"offset"`
}

type produceReport struct {
	Topic   string           `json:"topic"`
	Count   int              `json:"count"`
	Records []producedRecord `json:"records,omitempty"`
}

func topicProduceCommand(o *clientOptions) *cobra.Command {
	var pf produceFlags
	cmd := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Write stdin lines as records, one record per line",
		Long: `Write stdin lines as records, one record per line.

With --key-separator, the text before the first separator is the record's
key and the rest its value. Reports how many records were written; -v adds
each record's partition and offset.`,
		Example: `  echo 'hello' | strata topic produce greetings
  printf 'k1:v1\nk2:v2\n' | strata topic produce orders --key-separator : -H source=cli --acks all -v`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeTopics(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runProduce(cmd, o, &pf, args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&pf.keySeparator, "key-separator", "", "split each line into key and value at the first occurrence of this string")
	f.StringArrayVarP(&pf.headers, "header", "H", nil, "a header key=value added to every record (repeatable)")
	f.StringVar(&pf.acks, "acks", "all", "acknowledgements to wait for: 0, 1 or all")
	f.StringVar(&pf.compression, "compression", "none", "batch compression: none, gzip, snappy, lz4 or zstd")
	f.Int32Var(&pf.partition, "partition", -1, "write every record to this partition (-1: by key hash, or spread when keyless)")
	f.BoolVar(&pf.autoCreate, "allow-auto-topic-creation", false, "let the broker create a missing topic (if it allows it)")
	f.BoolVarP(&pf.verbose, "verbose", "v", false, "report each record's partition and offset")
	_ = cmd.RegisterFlagCompletionFunc("acks", cobra.FixedCompletions([]string{"0", "1", "all"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("compression", cobra.FixedCompletions([]string{"none", "gzip", "snappy", "lz4", "zstd"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func parseAcks(s string) (kgo.Acks, bool, error) {
	switch s {
	case "0":
		return kgo.NoAck(), false, nil
	case "1":
		return kgo.LeaderAck(), false, nil
	case "all", "-1":
		return kgo.AllISRAcks(), true, nil
	}
	return kgo.Acks{}, false, fmt.Errorf("--acks %q: want 0, 1 or all", s)
}

func parseCompression(s string) (kgo.CompressionCodec, error) {
	switch s {
	case "none", "":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("--compression %q: want none, gzip, snappy, lz4 or zstd", s)
}

func parseHeaders(hs []string) ([]kgo.RecordHeader, error) {
	var out []kgo.RecordHeader
	for _, h := range hs {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("-H %q: want key=value", h)
		}
		out = append(out, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return out, nil
}

func runProduce(cmd *cobra.Command, o *clientOptions, pf *produceFlags, topic string) error {
	acks, idempotent, err := parseAcks(pf.acks)
	if err != nil {
		return err
	}
	codec, err := parseCompression(pf.compression)
	if err != nil {
		return err
	}
	headers, err := parseHeaders(pf.headers)
	if err != nil {
		return err
	}
	opts := []kgo.Opt{
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(acks),
		kgo.ProducerBatchCompression(codec),
		kgo.RecordDeliveryTimeout(o.timeout),
		// A missing topic fails at once (checked below), not after retries.
		kgo.UnknownTopicRetries(0),
	}
	if !idempotent {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	if pf.partition >= 0 {
		opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
	if pf.autoCreate {
		opts = append(opts, kgo.AllowAutoTopicCreation())
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cl, err := o.client(ctx, opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := checkProduceTarget(ctx, o, cl, topic, pf); err != nil {
		return err
	}

	var (
		mu       sync.Mutex
		results  []producedRecord
		firstErr error
	)
	in := bufio.NewReaderSize(cmd.InOrStdin(), 64<<10)
	n := 0
	for {
		line, readErr := in.ReadBytes('\n')
		line = bytes.TrimSuffix(line, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) > 0 || readErr == nil {
			r := &kgo.Record{Value: line, Headers: headers, Partition: pf.partition}
			if pf.keySeparator != "" {
				if k, v, ok := bytes.Cut(line, []byte(pf.keySeparator)); ok {
					r.Key, r.Value = k, v
				}
			}
			i := n
			n++
			mu.Lock()
			results = append(results, producedRecord{Partition: -1, Offset: -1})
			mu.Unlock()
			cl.Produce(ctx, r, func(r *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					return
				}
				results[i].Partition = r.Partition
				if idempotent || pf.acks == "1" {
					results[i].Offset = r.Offset
				}
			})
		}
		if readErr == io.EOF {
			break
		}
		if readErr != nil {
			return fmt.Errorf("reading stdin: %w", readErr)
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("producing to %q: %s", topic, oneLine(err))
	}
	mu.Lock()
	defer mu.Unlock()
	written := 0
	for _, r := range results {
		if r.Partition >= 0 {
			written++
		}
	}
	if firstErr != nil {
		return fmt.Errorf("producing to %q: wrote %d of %d records: %s", topic, written, n, produceError(firstErr))
	}
	return printProduceReport(cmd.OutOrStdout(), o, pf, produceReport{Topic: topic, Count: written, Records: results})
}

// checkProduceTarget fails early with a clear message for a missing topic
// or partition, instead of letting every record fail the same way.
func checkProduceTarget(ctx context.Context, o *clientOptions, cl *kgo.Client, topic string, pf *produceFlags) error {
	if pf.autoCreate {
		return nil
	}
	rctx, cancel := o.requestContext(ctx)
	defer cancel()
	md, err := kadmFor(cl).ListTopics(rctx, topic)
	if err != nil {
		return o.requestError("describing topic", err)
	}
	if err := topicExists(md, topic); err != nil {
		return err
	}
	if pf.partition >= 0 {
		if _, ok := md[topic].Partitions[pf.partition]; !ok {
			return fmt.Errorf("topic %q has no partition %d (it has %d)", topic, pf.partition, len(md[topic].Partitions))
		}
	}
	return nil
}

func produceError(err error) string {
	if errors.Is(err, context.Canceled) {
		return "interrupted"
	}
	return kafkaError(err)
}

func printProduceReport(w io.Writer, o *clientOptions, pf *produceFlags, rep produceReport) error {
	if !pf.verbose {
		rep.Records = nil
	}
	if o.format == "json" {
		return writeJSON(w, rep)
	}
	noun := "records"
	if rep.Count == 1 {
		noun = "record"
	}
	fmt.Fprintf(w, "produced %d %s to %s\n", rep.Count, noun, rep.Topic)
	for _, r := range rep.Records {
		if r.Offset >= 0 {
			fmt.Fprintf(w, "%s/%d@%d\n", rep.Topic, r.Partition, r.Offset)
		} else {
			fmt.Fprintf(w, "%s/%d\n", rep.Topic, r.Partition)
		}
	}
	return nil
}
