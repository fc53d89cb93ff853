package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The client commands (topic, group, cluster, bench) speak only the Kafka
// protocol through franz-go, so they work against Kafka as well as Strata.
// Each command group owns a clientOptions, filled from its persistent
// flags; nothing is global, so tests can run many commands in one process.

const (
	envBrokers     = "STRATA_BROKERS"
	defaultBrokers = "127.0.0.1:9092"
)

// clientOptions are the flags every client command shares.
type clientOptions struct {
	brokers     string
	format      string
	timeout     time.Duration
	dialTimeout time.Duration
	security    securityOptions
}

// addClientFlags attaches the shared flags to a command group, where its
// subcommands inherit them.
func addClientFlags(cmd *cobra.Command) *clientOptions {
	o := &clientOptions{}
	def := os.Getenv(envBrokers)
	if def == "" {
		def = defaultBrokers
	}
	f := cmd.PersistentFlags()
	f.StringVar(&o.brokers, "brokers", def, "seed brokers, comma-separated host:port (default from $"+envBrokers+")")
	f.StringVar(&o.format, "format", "text", "output: text (tables for people) or json (for scripts)")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "timeout for each request to the cluster")
	f.DurationVar(&o.dialTimeout, "dial-timeout", 5*time.Second, "how long to wait for a broker to accept a connection")
	o.security.addFlags(cmd)
	_ = cmd.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	// Every subcommand's output format is checked once, before it runs.
	// (topic consume shadows --format with its record format.)
	cmd.PersistentPreRunE = func(*cobra.Command, []string) error { return o.checkFormat() }
	return o
}

func (o *clientOptions) seeds() []string {
	var out []string
	for _, s := range strings.Split(o.brokers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// checkFormat validates --format for commands that print text or JSON.
func (o *clientOptions) checkFormat() error {
	switch o.format {
	case "text", "json":
		return nil
	}
	return fmt.Errorf("unknown --format %q (want text or json)", o.format)
}

// reachable dials the seed brokers once and fails fast, naming the
// addresses, when none accepts a connection. Without it franz-go retries a
// dead broker for the whole retry timeout before giving up.
func (o *clientOptions) reachable(ctx context.Context) error {
	seeds := o.seeds()
	if len(seeds) == 0 {
		return errors.New("no brokers given (--brokers or $" + envBrokers + ")")
	}
	var last error
	d := net.Dialer{Timeout: o.dialTimeout}
	for _, s := range seeds {
		c, err := d.DialContext(ctx, "tcp", s)
		if err == nil {
			c.Close()
			return nil
		}
		last = err
	}
	return fmt.Errorf("cannot reach broker at %s: %s", strings.Join(seeds, ","), dialReason(last))
}

// dialReason shortens a dial error to its cause ("connection refused").
func dialReason(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, context.DeadlineExceeded), os.IsTimeout(err):
		return "timed out"
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return "cannot resolve " + dnsErr.Name
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Err != nil {
		return opErr.Err.Error()
	}
	return err.Error()
}

// client checks that a broker is reachable and opens a franz-go client
// with the shared options plus extra ones (producer or consumer settings).
func (o *clientOptions) client(ctx context.Context, extra ...kgo.Opt) (*kgo.Client, error) {
	if err := o.reachable(ctx); err != nil {
		return nil, err
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(o.seeds()...),
		kgo.DialTimeout(o.dialTimeout),
		kgo.RetryTimeout(o.timeout),
		kgo.ClientID("strata-cli"),
	}
	security, err := o.security.opts()
	if err != nil {
		return nil, err
	}
	opts = append(opts, security...)
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		return nil, err
	}
	return cl, nil
}

// admin opens a client for admin requests; close the returned kadm client.
func (o *clientOptions) admin(ctx context.Context) (*kadm.Client, error) {
	cl, err := o.client(ctx)
	if err != nil {
		return nil, err
	}
	adm := kadm.NewClient(cl)
	adm.SetTimeoutMillis(int32(o.timeout / time.Millisecond))
	return adm, nil
}

// requestContext bounds one admin round trip by --timeout.
func (o *clientOptions) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, o.timeout)
}

// requestError turns a failed request into one line that names what was
// being done; a timeout names the brokers and the limit.
func (o *clientOptions) requestError(what string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: no answer from %s within %s", what, o.brokers, o.timeout)
	}
	return fmt.Errorf("%s: %s", what, oneLine(err))
}

// kafkaError is "UNKNOWN_TOPIC_OR_PARTITION: This server does not host
// this topic-partition." for a Kafka error code (the name can be looked
// up, the description read), the flattened message otherwise.
func kafkaError(err error) string {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message + ": " + ke.Description
	}
	return oneLine(err)
}

// oneLine flattens an error message onto a single line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// writeJSON writes v as indented JSON and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes aligned columns for people.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(anySlice(header)...)
	}
	return t
}

func (t *table) row(cells ...any) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(t.tw, "\t")
		}
		fmt.Fprint(t.tw, c)
	}
	fmt.Fprint(t.tw, "\n")
}

func (t *table) flush() error { return t.tw.Flush() }

func anySlice(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// kadmFor wraps an open client for admin requests; closing the kadm client
// would close cl, so callers close cl themselves.
func kadmFor(cl *kgo.Client) *kadm.Client { return kadm.NewClient(cl) }

// completeFromCluster completes shell words with names list fetches from
// the cluster; nothing when the cluster cannot be asked.
func (o *clientOptions) completeFromCluster(list func(context.Context, *kadm.Client) ([]string, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
		adm, ctx, done, err := o.adminRequest(cmd.Context())
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer done()
		names, err := list(ctx, adm)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// adminRequest connects an admin client and returns it with a context
// bounded by --timeout; done releases both.
// adminRequestWith is adminRequest that also returns the kgo client under
// the kadm one, for the requests kadm does not wrap.
func (o *clientOptions) adminRequestWith(ctx context.Context) (*kadm.Client, *kgo.Client, context.Context, func(), error) {
	cl, err := o.client(ctx)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	adm := kadm.NewClient(cl)
	adm.SetTimeoutMillis(int32(o.timeout / time.Millisecond))
	rctx, cancel := o.requestContext(ctx)
	return adm, cl, rctx, func() { cancel(); adm.Close() }, nil
}

func (o *clientOptions) adminRequest(ctx context.Context) (*kadm.Client, context.Context, func(), error) {
	adm, err := o.admin(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	rctx, cancel := o.requestContext(ctx)
	return adm, rctx, func() { cancel(); adm.Close() }, nil
}
