package service

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/strata-io/strata/examples/ecommerce/events"
)

// RunNotification is the notification service: it e-mails the customer of
// every OrderCreated, once per order. Sending is writing a line to --out,
// which is also the ledger of e-mails sent. If the service is down, checkout
// does not notice; when it comes back it resumes from its group's committed
// offset and catches up on the e-mails it missed, skipping the few orders it
// had already e-mailed when it crashed.
func RunNotification(ctx context.Context, f *Flags, logger *slog.Logger) error {
	return onceEach(ctx, f, logger, "sending order confirmations", "emails.sent", func(order events.OrderCreated) string {
		return fmt.Sprintf("email to %s: order %s confirmed: %s, %s", order.Customer, order.OrderID, describeItems(order.Items), events.Dollars(order.Total))
	})
}
