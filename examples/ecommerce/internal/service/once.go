package service

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/examples/ecommerce/events"
)

// once makes the effect of r for orderID happen once: if the order is in
// the ledger already (the record was redelivered after a crash, or the
// event was produced twice), it logs and skips it; otherwise it calls effect,
// which acts and returns the line to record.
func once(ledger *Ledger, logger *slog.Logger, r *kgo.Record, orderID string, effect func() string) error {
	if ledger.Done(orderID) {
		logger.Info("order already handled, skipping redelivered event", "order", orderID, "partition", r.Partition, "offset", r.Offset)
		return nil
	}
	return ledger.Record(orderID, effect())
}

// logInvalid logs a record that is not a valid event (events.ErrInvalid).
// Such a record never becomes valid, so the services commit past it rather
// than stop on it; a real service would also copy it to a dead-letter topic.
func logInvalid(logger *slog.Logger, r *kgo.Record, err error) {
	logger.Warn("skipping invalid event", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
}

// describeItems is "2 x BOOK-1, 1 x MUG-7".
func describeItems(items []events.Item) string {
	var b strings.Builder
	for i, it := range items {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d x %s", it.Quantity, it.SKU)
	}
	return b.String()
}
