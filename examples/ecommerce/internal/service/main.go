package service

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

const (
	envBrokers     = "STRATA_BROKERS"
	defaultBrokers = "127.0.0.1:9092"
)

// Flags are the command-line flags the programs share.
type Flags struct {
	Brokers    string
	Partitions int
	Out        string

	// Consumers only.
	Group          string
	SessionTimeout time.Duration
	CommitInterval time.Duration
}

// RegisterFlags adds the flags every program takes to fs. outHelp says what
// the program writes to --out.
func RegisterFlags(fs *flag.FlagSet, outHelp string) *Flags {
	f := &Flags{}
	def := os.Getenv(envBrokers)
	if def == "" {
		def = defaultBrokers
	}
	fs.StringVar(&f.Brokers, "brokers", def, "seed brokers, comma-separated host:port (default from $"+envBrokers+")")
	fs.IntVar(&f.Partitions, "partitions", 3, "partitions for the topics this program creates if they do not exist")
	fs.StringVar(&f.Out, "out", "-", outHelp+`, one line per order ("-" for stdout)`)
	return f
}

// RegisterConsumerFlags adds the consumer group flags to fs.
func (f *Flags) RegisterConsumerFlags(fs *flag.FlagSet, defaultGroup string) {
	fs.StringVar(&f.Group, "group", defaultGroup, "consumer group id")
	// Kafka's default session.timeout.ms is 45s: that long after a crash
	// the group notices the dead member and a restarted one can take its
	// partitions. A demo wants it shorter; the broker's
	// group.min.session.timeout.ms (6s) is the floor.
	fs.DurationVar(&f.SessionTimeout, "session-timeout", 10*time.Second, "consumer group session timeout (session.timeout.ms)")
	fs.DurationVar(&f.CommitInterval, "commit-interval", time.Second, "how often processed offsets are committed (auto.commit.interval.ms)")
}

// Seeds are the --brokers addresses.
func (f *Flags) Seeds() []string {
	var out []string
	for _, s := range strings.Split(f.Brokers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Main runs a service until it returns or SIGINT/SIGTERM cancels its
// context, and exits 1 if it failed. Logs go to stderr.
func Main(name string, run func(ctx context.Context, logger *slog.Logger) error) {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("service", name)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, logger)
	stop()
	if err != nil {
		logger.Error("exiting", "err", err)
		os.Exit(1)
	}
	logger.Info("stopped")
}
