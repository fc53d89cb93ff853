package service

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/examples/ecommerce/events"
)

// OrdersOptions are the order service's own flags.
type OrdersOptions struct {
	// Listen is the HTTP address of POST /orders and GET /orders/{id}.
	Listen string
	// Generate, when positive, places that many random orders instead of
	// serving HTTP, and exits.
	Generate int
	// Rate is orders per second in generate mode; 0 places them one after
	// the other as fast as the log acknowledges them.
	Rate float64
}

// StatusPending is the status of an order the order service has accepted.
// Nothing moves it further here: other services react to the event, and the
// order service does not know they exist.
const StatusPending = "PENDING"

// RunOrders is the order service, the fast path of checkout: it saves the
// order as PENDING, appends OrderCreated to orders-created, and answers. It
// waits for the log to acknowledge the event (acks=all, idempotent), which
// takes milliseconds, and for nothing downstream: payment, stock and e-mail
// happen later, in services the customer never waits on.
//
// --out gets a line for each order whose event the log acknowledged.
func RunOrders(ctx context.Context, f *Flags, o OrdersOptions, logger *slog.Logger) error {
	ledger, err := OpenLedger(f.Out)
	if err != nil {
		return err
	}
	defer ledger.Close()
	cl, err := kgo.NewClient(append(producerOpts(), kgo.SeedBrokers(f.Seeds()...), kgo.WithLogger(kgoLogger{logger}))...)
	if err != nil {
		return err
	}
	// Close flushes: it waits for records in flight before returning.
	defer cl.Close()
	if err := EnsureTopics(ctx, cl, f.Partitions, events.TopicOrdersCreated); err != nil {
		return err
	}
	s := &orders{client: cl, ledger: ledger, logger: logger, pending: map[string]events.OrderCreated{}}
	if o.Generate > 0 {
		return s.generate(ctx, o.Generate, o.Rate)
	}
	return s.serve(ctx, o.Listen)
}

type orders struct {
	client *kgo.Client
	ledger *Ledger
	logger *slog.Logger

	mu      sync.Mutex
	pending map[string]events.OrderCreated // the local order store, by order id
}

// place saves an order as PENDING and appends its OrderCreated event.
//
// Saving and appending are two writes that can disagree after a crash
// between them (the dual-write problem). Here the store is memory and a
// failed append forgets the order, so the client is told to retry. A real
// service writes the order and the event to its database in one transaction
// and relays the event to the log from there (the transactional outbox).
func (s *orders) place(ctx context.Context, customer string, items []events.Item) (events.OrderCreated, error) {
	if customer == "" {
		return events.OrderCreated{}, fmt.Errorf("%w: an order needs a customer", events.ErrInvalid)
	}
	if err := events.ValidateItems(items); err != nil {
		return events.OrderCreated{}, err
	}
	order := events.OrderCreated{
		OrderID:   newOrderID(),
		Customer:  customer,
		Items:     items,
		Total:     events.TotalOf(items),
		CreatedAt: time.Now().UTC(),
	}
	value, err := json.Marshal(order)
	if err != nil {
		return order, err
	}
	s.mu.Lock()
	s.pending[order.OrderID] = order
	s.mu.Unlock()

	record := &kgo.Record{
		Topic:   events.TopicOrdersCreated,
		Key:     []byte(order.OrderID),
		Value:   value,
		Headers: []kgo.RecordHeader{{Key: events.HeaderType, Value: []byte(events.TypeOrderCreated)}},
	}
	// A client hanging up or a SIGTERM must not abandon an append midway,
	// leaving an event the order service has forgotten: the append runs to
	// its end (milliseconds, or until Close fails it when the broker is gone).
	if err := s.client.ProduceSync(context.WithoutCancel(ctx), record).FirstErr(); err != nil {
		s.mu.Lock()
		delete(s.pending, order.OrderID)
		s.mu.Unlock()
		return order, fmt.Errorf("appending OrderCreated: %w", err)
	}
	line := fmt.Sprintf("created for %s: %s, %s", order.Customer, describeItems(order.Items), events.Dollars(order.Total))
	return order, s.ledger.Record(order.OrderID, line)
}

func (s *orders) lookup(orderID string) (events.OrderCreated, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	order, ok := s.pending[orderID]
	return order, ok
}

// newOrderID is a random id such as ord-3f9a1c0b7e2d.
func newOrderID() string {
	var b [6]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read never fails
	return "ord-" + hex.EncodeToString(b[:])
}

// orderRequest is the body of POST /orders.
type orderRequest struct {
	Customer string        `json:"customer"`
	Items    []events.Item `json:"items"`
}

// orderResponse answers POST /orders and GET /orders/{id}.
type orderResponse struct {
	OrderID string        `json:"order_id"`
	Status  string        `json:"status"`
	Items   []events.Item `json:"items,omitempty"`
	Total   int64         `json:"total_cents"`
}

func (s *orders) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", s.handleCreate)
	mux.HandleFunc("GET /orders/{id}", s.handleGet)
	return mux
}

func (s *orders) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req orderRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		http.Error(w, "bad order: "+err.Error(), http.StatusBadRequest)
		return
	}
	order, err := s.place(r.Context(), req.Customer, req.Items)
	switch {
	case errors.Is(err, events.ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case err != nil:
		s.logger.Warn("order not placed", "err", err)
		http.Error(w, "order not placed, try again: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	writeJSON(w, orderResponse{OrderID: order.OrderID, Status: StatusPending, Total: order.Total})
}

func (s *orders) handleGet(w http.ResponseWriter, r *http.Request) {
	order, ok := s.lookup(r.PathValue("id"))
	if !ok {
		http.Error(w, "no such order", http.StatusNotFound)
		return
	}
	writeJSON(w, orderResponse{OrderID: order.OrderID, Status: StatusPending, Items: order.Items, Total: order.Total})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// serve answers HTTP on listen until ctx is cancelled, then lets requests
// under way finish.
func (s *orders) serve(ctx context.Context, listen string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second}
	s.logger.Info("taking orders", "http", "http://"+ln.Addr().String()+"/orders")
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}

var (
	customers = []string{"alice@example.com", "bob@example.com", "carol@example.com", "dave@example.com", "erin@example.com"}
	catalogue = []events.Item{
		{SKU: "BOOK-1", PriceCents: 1299},
		{SKU: "MUG-7", PriceCents: 850},
		{SKU: "SHIRT-M", PriceCents: 2000},
		{SKU: "SOCKS-3", PriceCents: 599},
		{SKU: "LAMP-2", PriceCents: 4599},
	}
)

// generate places n random orders, rate a second (0: back to back).
func (s *orders) generate(ctx context.Context, n int, rate float64) error {
	var tick <-chan time.Time
	if rate > 0 {
		ticker := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer ticker.Stop()
		tick = ticker.C
	}
	s.logger.Info("generating orders", "orders", n, "per.second", rate)
	for i := 0; i < n; i++ {
		if tick != nil {
			select {
			case <-tick:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			s.logger.Info("stopped generating", "orders", i)
			return nil
		}
		items := make([]events.Item, 1+rand.IntN(3))
		for j, k := range rand.Perm(len(catalogue))[:len(items)] {
			items[j] = catalogue[k]
			items[j].Quantity = 1 + rand.IntN(3)
		}
		if _, err := s.place(ctx, customers[rand.IntN(len(customers))], items); err != nil {
			return err
		}
	}
	s.logger.Info("generated orders", "orders", n)
	return nil
}
