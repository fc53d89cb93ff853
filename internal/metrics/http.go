package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// AdminServer is the admin HTTP listener (strata.admin.listener, default
// 127.0.0.1:9644): /metrics, /healthz, /readyz and /debug/pprof/.
type AdminServer struct {
	srv *http.Server
	ln  net.Listener
}

// Health answers /healthz (the process is up and its logs are usable) and
// /readyz (it serves clients): nil for yes, or the reason.
type Health struct {
	Live  func() error
	Ready func() error
}

// StartAdmin listens on addr and serves until Close.
func StartAdmin(addr string, m *Broker, h Health, logger *slog.Logger) (*AdminServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: admin listener on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry}))
	mux.HandleFunc("/healthz", check(h.Live))
	mux.HandleFunc("/readyz", check(h.Ready))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	a := &AdminServer{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("admin listener stopped", "err", err)
		}
	}()
	return a, nil
}

// Addr is the address the admin server listens on.
func (a *AdminServer) Addr() string { return a.ln.Addr().String() }

// Close stops the server.
func (a *AdminServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return a.srv.Shutdown(ctx)
}

func check(fn func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if fn != nil {
			if err := fn(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintln(w, err)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	}
}
