// Package events is the contract between the e-commerce services: the
// topics they share and the JSON events on them. It is the only thing the
// services have in common; none of them knows who else reads a topic.
//
// Every record is keyed by its order id, so all events of one order land on
// the same partition, in order, and consumers can deduplicate by the key.
//
//	topic              key       value (JSON)       produced by  consumed by
//	orders-created     order id  OrderCreated       orders       payment, inventory, notification
//	payments-approved  order id  PaymentApproved    payment      fulfillment
package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Topics.
const (
	TopicOrdersCreated    = "orders-created"
	TopicPaymentsApproved = "payments-approved"
)

// HeaderType is the record header naming the event type, so a reader can
// tell events apart without decoding the value.
const HeaderType = "event-type"

// Event type names, the values of HeaderType.
const (
	TypeOrderCreated    = "OrderCreated"
	TypePaymentApproved = "PaymentApproved"
)

// ErrInvalid is returned by Decode functions when a record is not a
// well-formed event: undecodable JSON or a missing required field. Such a
// record will never become valid, so consumers skip it rather than retry.
var ErrInvalid = errors.New("events: invalid event")

// Item is one line of an order. Money is in cents to keep it exact.
type Item struct {
	SKU        string `json:"sku"`
	Quantity   int    `json:"quantity"`
	PriceCents int64  `json:"price_cents"`
}

// OrderCreated is appended to orders-created when a customer checks out.
type OrderCreated struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"` // an e-mail address
	Items    []Item `json:"items"`
	// Total is the sum of the items' Quantity*PriceCents, in cents.
	Total     int64     `json:"total_cents"`
	CreatedAt time.Time `json:"created_at"`
}

// PaymentApproved is appended to payments-approved when the customer's card
// has been charged for an order. It carries the items so fulfillment can pack
// the box without asking the order service (event-carried state transfer).
type PaymentApproved struct {
	OrderID   string `json:"order_id"`
	PaymentID string `json:"payment_id"`
	Customer  string `json:"customer"`
	Items     []Item `json:"items"`
	// Amount is what was charged, in cents.
	Amount     int64     `json:"amount_cents"`
	ApprovedAt time.Time `json:"approved_at"`
}

// TotalOf sums the items' prices.
func TotalOf(items []Item) int64 {
	var total int64
	for _, it := range items {
		total += int64(it.Quantity) * it.PriceCents
	}
	return total
}

// ValidateItems reports what makes items unacceptable in an order, or nil.
func ValidateItems(items []Item) error {
	if len(items) == 0 {
		return fmt.Errorf("%w: an order needs at least one item", ErrInvalid)
	}
	for i, it := range items {
		if it.SKU == "" || it.Quantity <= 0 || it.PriceCents < 0 {
			return fmt.Errorf("%w: item %d needs a sku, a positive quantity and a price >= 0", ErrInvalid, i)
		}
	}
	return nil
}

// DecodeOrderCreated decodes an orders-created value.
func DecodeOrderCreated(value []byte) (OrderCreated, error) {
	var e OrderCreated
	if err := json.Unmarshal(value, &e); err != nil {
		return e, fmt.Errorf("%w: OrderCreated: %v", ErrInvalid, err)
	}
	if e.OrderID == "" {
		return e, fmt.Errorf("%w: OrderCreated without an order_id", ErrInvalid)
	}
	return e, nil
}

// DecodePaymentApproved decodes a payments-approved value.
func DecodePaymentApproved(value []byte) (PaymentApproved, error) {
	var e PaymentApproved
	if err := json.Unmarshal(value, &e); err != nil {
		return e, fmt.Errorf("%w: PaymentApproved: %v", ErrInvalid, err)
	}
	if e.OrderID == "" {
		return e, fmt.Errorf("%w: PaymentApproved without an order_id", ErrInvalid)
	}
	return e, nil
}

// Dollars formats cents as $12.34.
func Dollars(cents int64) string {
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	return fmt.Sprintf("%s$%d.%02d", sign, cents/100, cents%100)
}
