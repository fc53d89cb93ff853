package service

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/examples/ecommerce/events"
)

// RunPayment is the payment service: for every OrderCreated it charges the
// customer once and appends PaymentApproved to payments-approved. It does
// not call fulfillment; fulfillment reacts to the event (choreography).
//
// --out is the ledger of charges. A redelivered order is not charged again,
// but its PaymentApproved is produced again: the service may have crashed
// after the charge and before the event was acknowledged, and skipping it
// would leave the order unshipped. Fulfillment deduplicates by order id.
func RunPayment(ctx context.Context, f *Flags, logger *slog.Logger) error {
	ledger, c, err := startService(ctx, f, logger, []string{events.TopicOrdersCreated, events.TopicPaymentsApproved}, producerOpts()...)
	if err != nil {
		return err
	}
	defer ledger.Close()
	logger.Info("charging cards for new orders", "orders.charged", ledger.Len())
	p := &payment{client: c.Client, ledger: ledger, logger: logger}
	return c.Run(ctx, p.handle)
}

type payment struct {
	client *kgo.Client
	ledger *Ledger
	logger *slog.Logger
}

func (p *payment) handle(ctx context.Context, records []*kgo.Record) error {
	var approvals []*kgo.Record
	for _, r := range records {
		order, err := events.DecodeOrderCreated(r.Value)
		if err != nil {
			logInvalid(p.logger, r, err)
			continue
		}
		// The order id is the idempotency key a real payment provider
		// would be given; here the ledger plays the provider.
		paymentID := "pay-" + order.OrderID
		err = once(p.ledger, p.logger, r, order.OrderID, func() string {
			return fmt.Sprintf("charged %s to %s payment=%s", events.Dollars(order.Total), order.Customer, paymentID)
		})
		if err != nil {
			return err
		}
		approved := events.PaymentApproved{
			OrderID:    order.OrderID,
			PaymentID:  paymentID,
			Customer:   order.Customer,
			Items:      order.Items,
			Amount:     order.Total,
			ApprovedAt: time.Now().UTC(),
		}
		value, err := json.Marshal(approved)
		if err != nil {
			return err
		}
		approvals = append(approvals, &kgo.Record{
			Topic:   events.TopicPaymentsApproved,
			Key:     []byte(order.OrderID),
			Value:   value,
			Headers: []kgo.RecordHeader{{Key: events.HeaderType, Value: []byte(events.TypePaymentApproved)}},
		})
	}
	if err := p.ledger.Sync(); err != nil {
		return err
	}
	// Only once payments-approved has the events may the orders be
	// committed: otherwise a crash here would lose them.
	return p.client.ProduceSync(ctx, approvals...).FirstErr()
}
