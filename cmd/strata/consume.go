package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

type consumeFlags struct {
	offset     string
	num        int
	group      string
	partitions []int32
	format     string
}

func topicConsumeCommand(o *clientOptions) *cobra.Command {
	var cf consumeFlags
	cmd := &cobra.Command{
		Use:   "consume TOPIC",
		Short: "Print records from a topic, as JSON lines by default",
		Long: `Print records from a topic until --num records or Ctrl-C.

--offset picks where each partition starts:
  start        the log start, the oldest record kept (default)
  end          the log end: only records written from now on
  N            offset N
  -N           N records before the log end
  @MS          the first record at or after unix time MS (milliseconds)
With --group, the group's committed offsets win; --offset only applies to
partitions without one. Records printed are committed for the group.

--format is json (one object per line, the default), text (the value
alone), a template with % verbs (%t topic, %p partition, %o offset,
%d timestamp in unix ms, %k key, %v value, %h headers as k=v,k=v, %%
a percent sign; \n and \t escapes), or a Go text/template over .Topic,
.Partition, .Offset, .Timestamp, .Key, .Value and .Headers (each with .Key
and .Value). A newline is added after each record unless the format ends
with one.`,
		Example: `  strata topic consume orders --offset start --num 10
  strata topic consume orders --offset -5 --format '%p/%o %k=%v'
  strata topic consume orders --group audit --format '{{.Offset}} {{.Value}}'`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeTopics(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runConsume(cmd, o, &cf, args[0])
		},
	}
	f := cmd.Flags()
	f.StringVarP(&cf.offset, "offset", "o", "start", "where to start: start, end, N, -N or @unix-ms")
	f.IntVarP(&cf.num, "num", "n", 0, "exit after this many records (0: until Ctrl-C)")
	f.StringVarP(&cf.group, "group", "g", "", "consume as this consumer group and commit what is printed")
	f.Int32SliceVarP(&cf.partitions, "partitions", "p", nil, "only these partitions (comma-separated; not with --group)")
	// Shadows the inherited --format: records have their own formats.
	f.StringVarP(&cf.format, "format", "f", "json", "json, text, a %-verb template or a Go template (see above)")
	return cmd
}

// startOffset is a parsed --offset.
type startOffset struct {
	kind  byte  // 's' start, 'e' end, 'o' exact, 'r' relative to end, 't' timestamp
	value int64 // offset, count back from the end, or unix ms
}

func parseStartOffset(s string) (startOffset, error) {
	bad := func() (startOffset, error) {
		return startOffset{}, fmt.Errorf("malformed --offset %q: want start, end, N, -N or @unix-ms", s)
	}
	switch s {
	case "start", "oldest", "earliest", "beginning":
		return startOffset{kind: 's'}, nil
	case "end", "newest", "latest":
		return startOffset{kind: 'e'}, nil
	}
	if rest, ok := strings.CutPrefix(s, "@"); ok {
		ms, err := strconv.ParseInt(rest, 10, 64)
		if err != nil || ms < 0 {
			return bad()
		}
		return startOffset{kind: 't', value: ms}, nil
	}
	if rest, ok := strings.CutPrefix(s, "-"); ok {
		n, err := strconv.ParseInt(rest, 10, 64)
		if err != nil || n < 0 {
			return bad()
		}
		return startOffset{kind: 'r', value: n}, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return bad()
	}
	return startOffset{kind: 'o', value: n}, nil
}

// kgoOffset is the offset as a franz-go reset offset, for groups.
func (so startOffset) kgoOffset() kgo.Offset {
	switch so.kind {
	case 's':
		return kgo.NewOffset().AtStart()
	case 'e':
		return kgo.NewOffset().AtEnd()
	case 'r':
		return kgo.NewOffset().AtEnd().Relative(-so.value)
	case 't':
		return kgo.NewOffset().AfterMilli(so.value)
	}
	return kgo.NewOffset().At(so.value)
}

// resolve turns the offset into an exact offset per partition, so that
// -N is clamped to the log start and @MS past the last record means the end.
func (so startOffset) resolve(ctx context.Context, adm *kadm.Client, topic string, partitions []int32) (map[int32]int64, error) {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	var times kadm.ListedOffsets
	if so.kind == 't' {
		if times, err = adm.ListOffsetsAfterMilli(ctx, so.value, topic); err != nil {
			return nil, err
		}
	}
	out := make(map[int32]int64, len(partitions))
	for _, p := range partitions {
		start, ok1 := starts.Lookup(topic, p)
		end, ok2 := ends.Lookup(topic, p)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("no offsets for %s/%d", topic, p)
		}
		if start.Err != nil {
			return nil, fmt.Errorf("%s/%d: %s", topic, p, kafkaError(start.Err))
		}
		if end.Err != nil {
			return nil, fmt.Errorf("%s/%d: %s", topic, p, kafkaError(end.Err))
		}
		switch so.kind {
		case 's':
			out[p] = start.Offset
		case 'e':
			out[p] = end.Offset
		case 'o':
			out[p] = so.value
		case 'r':
			out[p] = max(start.Offset, end.Offset-so.value)
		case 't':
			t, ok := times.Lookup(topic, p)
			switch {
			case !ok || t.Err != nil || t.Offset < 0:
				out[p] = end.Offset
			default:
				out[p] = t.Offset
			}
		}
	}
	return out, nil
}

// consumedHeader and consumedRecord are what formats see.
type consumedHeader struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type consumedRecord struct {
	Topic     string           `json:"topic"`
	Partition int32            `json:"partition"`
	Offset    int64            `json:"offset"`
	Timestamp int64            `json:"timestamp"`
	Key       *string          `json:"key"`
	Value     string           `json:"value"`
	Headers   []consumedHeader `json:"headers,omitempty"`
}

// templateRecord is consumedRecord for Go templates, where a nil key
// prints as empty rather than <nil>.
type templateRecord struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp int64
	Key       string
	Value     string
	Headers   []consumedHeader
}

func newConsumedRecord(r *kgo.Record) consumedRecord {
	c := consumedRecord{
		Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		Timestamp: r.Timestamp.UnixMilli(), Value: string(r.Value),
	}
	if r.Key != nil {
		k := string(r.Key)
		c.Key = &k
	}
	for _, h := range r.Headers {
		c.Headers = append(c.Headers, consumedHeader{Key: h.Key, Value: string(h.Value)})
	}
	return c
}

// recordFormatter writes one record.
type recordFormatter func(w *bufio.Writer, r consumedRecord) error

func parseRecordFormat(format string) (recordFormatter, error) {
	switch {
	case format == "json":
		return func(w *bufio.Writer, r consumedRecord) error {
			b, err := json.Marshal(r)
			if err != nil {
				return err
			}
			w.Write(b)
			return w.WriteByte('\n')
		}, nil
	case format == "text":
		return func(w *bufio.Writer, r consumedRecord) error {
			w.WriteString(r.Value)
			return w.WriteByte('\n')
		}, nil
	case strings.Contains(format, "{{"):
		tmpl, err := template.New("format").Option("missingkey=error").Parse(format)
		if err != nil {
			return nil, fmt.Errorf("malformed --format template: %s", oneLine(err))
		}
		newline := !strings.HasSuffix(format, "\n")
		return func(w *bufio.Writer, r consumedRecord) error {
			tr := templateRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp, Value: r.Value, Headers: r.Headers}
			if r.Key != nil {
				tr.Key = *r.Key
			}
			if err := tmpl.Execute(w, tr); err != nil {
				return fmt.Errorf("--format template: %s", oneLine(err))
			}
			if newline {
				return w.WriteByte('\n')
			}
			return nil
		}, nil
	}
	return parsePercentFormat(format)
}

// parsePercentFormat compiles an rpk-like %-verb format into a list of
// pieces so each record costs no parsing.
func parsePercentFormat(format string) (recordFormatter, error) {
	type piece struct {
		literal string
		verb    byte
	}
	var pieces []piece
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			pieces = append(pieces, piece{literal: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(format); i++ {
		c := format[i]
		if (c != '%' && c != '\\') || i+1 == len(format) {
			if c == '%' {
				return nil, fmt.Errorf("malformed --format %q: %% at the end (write %%%% for a percent sign)", format)
			}
			lit.WriteByte(c)
			continue
		}
		i++
		next := format[i]
		if c == '\\' {
			switch next {
			case 'n':
				lit.WriteByte('\n')
			case 't':
				lit.WriteByte('\t')
			case 'r':
				lit.WriteByte('\r')
			case '\\':
				lit.WriteByte('\\')
			default:
				lit.WriteByte('\\')
				lit.WriteByte(next)
			}
			continue
		}
		switch next {
		case '%':
			lit.WriteByte('%')
		case 't', 'p', 'o', 'd', 'k', 'v', 'h':
			flush()
			pieces = append(pieces, piece{verb: next})
		default:
			return nil, fmt.Errorf("malformed --format %q: unknown verb %%%c (want %%t %%p %%o %%d %%k %%v %%h)", format, next)
		}
	}
	flush()
	newline := len(pieces) == 0 || pieces[len(pieces)-1].verb != 0 || !strings.HasSuffix(pieces[len(pieces)-1].literal, "\n")
	return func(w *bufio.Writer, r consumedRecord) error {
		for _, p := range pieces {
			switch p.verb {
			case 0:
				w.WriteString(p.literal)
			case 't':
				w.WriteString(r.Topic)
			case 'p':
				w.WriteString(strconv.Itoa(int(r.Partition)))
			case 'o':
				w.WriteString(strconv.FormatInt(r.Offset, 10))
			case 'd':
				w.WriteString(strconv.FormatInt(r.Timestamp, 10))
			case 'k':
				if r.Key != nil {
					w.WriteString(*r.Key)
				}
			case 'v':
				w.WriteString(r.Value)
			case 'h':
				for i, h := range r.Headers {
					if i > 0 {
						w.WriteByte(',')
					}
					w.WriteString(h.Key + "=" + h.Value)
				}
			}
		}
		if newline {
			return w.WriteByte('\n')
		}
		return nil
	}, nil
}

func runConsume(cmd *cobra.Command, o *clientOptions, cf *consumeFlags, topic string) error {
	so, err := parseStartOffset(cf.offset)
	if err != nil {
		return err
	}
	format, err := parseRecordFormat(cf.format)
	if err != nil {
		return err
	}
	if cf.num < 0 {
		return fmt.Errorf("--num must not be negative, not %d", cf.num)
	}
	if cf.group != "" && len(cf.partitions) > 0 {
		return errors.New("--partitions and --group do not mix: a group assigns partitions itself")
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// Check the topic (and partitions) with a plain client first, so a
	// typo gets a clear error instead of a consumer that waits forever.
	meta, err := o.client(ctx)
	if err != nil {
		return err
	}
	adm := kadm.NewClient(meta)
	defer adm.Close()
	rctx, cancel := o.requestContext(ctx)
	defer cancel()
	md, err := adm.ListTopics(rctx, topic)
	if err != nil {
		return o.requestError("describing topic", err)
	}
	if err := topicExists(md, topic); err != nil {
		return err
	}
	partitions := cf.partitions
	if len(partitions) == 0 {
		partitions = md[topic].Partitions.Numbers()
	}
	for _, p := range partitions {
		if _, ok := md[topic].Partitions[p]; !ok {
			return fmt.Errorf("topic %q has no partition %d (it has %d)", topic, p, len(md[topic].Partitions))
		}
	}

	opts := []kgo.Opt{kgo.FetchMaxWait(time.Second)}
	if cf.group != "" {
		opts = append(opts,
			kgo.ConsumerGroup(cf.group),
			kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(so.kgoOffset()),
			kgo.AutoCommitMarks(),
		)
	} else {
		offsets, err := so.resolve(rctx, adm, topic, partitions)
		if err != nil {
			return o.requestError("listing offsets", err)
		}
		at := make(map[int32]kgo.Offset, len(offsets))
		for p, off := range offsets {
			at[p] = kgo.NewOffset().At(off)
		}
		opts = append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: at}))
	}
	cancel()
	cl, err := o.client(ctx, opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	err = consumeLoop(ctx, cl, cmd.OutOrStdout(), format, cf.num, cf.group != "")
	if cf.group != "" {
		// Commit what was printed even after Ctrl-C, then leave the group
		// (Close) so the next member does not wait for a session timeout.
		cctx, cancel := o.requestContext(cmd.Context())
		defer cancel()
		if cerr := cl.CommitMarkedOffsets(cctx); cerr != nil && err == nil {
			err = fmt.Errorf("committing offsets for group %q: %s", cf.group, oneLine(cerr))
		}
	}
	return err
}

// consumeLoop prints records until num (0: no limit) or ctx ends; an end
// by ctx (Ctrl-C) is not an error.
func consumeLoop(ctx context.Context, cl *kgo.Client, out io.Writer, format recordFormatter, num int, mark bool) error {
	w := bufio.NewWriter(out)
	defer w.Flush()
	seen := 0
	for num == 0 || seen < num {
		fetches := cl.PollRecords(ctx, max(num-seen, 0))
		if ctx.Err() != nil {
			return nil
		}
		var errs []string
		fetches.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
				return
			}
			switch {
			case isBrokerTooOld(err):
				errs = append(errs, errNoGroups.Error())
			case t == "": // a group error
				errs = append(errs, kafkaError(err))
			default:
				errs = append(errs, fmt.Sprintf("%s/%d: %s", t, p, kafkaError(err)))
			}
		})
		if len(errs) > 0 {
			sort.Strings(errs)
			return fmt.Errorf("consuming: %s", strings.Join(errs, "; "))
		}
		for _, r := range fetches.Records() {
			if num > 0 && seen == num {
				break
			}
			if err := format(w, newConsumedRecord(r)); err != nil {
				return err
			}
			if mark {
				cl.MarkCommitRecords(r)
			}
			seen++
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return nil
}
