package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/strata-io/strata/internal/broker"
	"github.com/strata-io/strata/internal/config"
)

func serveCommand() *cobra.Command {
	var file string
	var sets []string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a broker (zero configuration: 127.0.0.1:9092, data in ./strata-data)",
		Long: `Run a Strata broker.

With no flags it listens on 127.0.0.1:9092 and keeps its data in ./strata-data.
Configuration uses Kafka's key names and defaults, from (lowest precedence
first) a server.properties file, STRATA_* or KAFKA_* environment variables
(KAFKA_LOG_RETENTION_HOURS=24 sets log.retention.hours), and --set flags.`,
		Example: `  strata serve
  strata serve --set log.dirs=/var/lib/strata --set listeners=PLAINTEXT://0.0.0.0:9092
  strata serve --config server.properties`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(config.LoadOptions{File: file, Sets: sets, Environ: os.Environ()})
			if err != nil {
				return err
			}
			return serve(cmd.Context(), cfg)
		},
	}
	cmd.Flags().StringVar(&file, "config", "", "a server.properties file")
	cmd.Flags().StringArrayVar(&sets, "set", nil, "a configuration key=value (repeatable)")
	return cmd
}

func serve(ctx context.Context, cfg *config.Server) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.String("strata.log.level"))); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	for _, w := range cfg.Warnings {
		logger.Warn(w)
	}
	logConfiguration(logger, cfg)
	if err := os.MkdirAll(cfg.LogDirs()[0], 0o755); err != nil {
		return fmt.Errorf("creating log.dirs: %w", err)
	}
	b, err := broker.New(broker.Options{Config: cfg, Logger: logger})
	if err != nil {
		return err
	}
	if err := b.Start(); err != nil {
		b.Close()
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	select {
	case <-ctx.Done():
	case <-b.Failed():
		// As Kafka halts when its last log directory fails: the
		// controller has moved this node's leaderships away, and a
		// supervisor restarts it once the disk is fixed.
		err := b.FailedErr()
		logger.Error("log directory failed; stopping", "err", err)
		b.Kill()
		return fmt.Errorf("log directory failed: %w", err)
	}
	logger.Info("shutting down")
	return b.Close()
}

// logConfiguration writes the start-up summary: every key that is not at
// its default, and the few every operator wants to see.
func logConfiguration(logger *slog.Logger, cfg *config.Server) {
	attrs := []any{}
	for _, s := range cfg.Effective() {
		switch s.Key.Name {
		case "node.id", "log.dirs", "listeners":
		default:
			if s.Source == config.SourceDefault {
				continue
			}
		}
		attrs = append(attrs, s.Key.Name, s.Value)
	}
	logger.Info("configuration", attrs...)
	var set []string
	for _, s := range cfg.Effective() {
		set = append(set, s.Key.Name+"="+s.Value)
	}
	logger.Debug("effective configuration", "settings", strings.Join(set, " "))
}
