// Package service holds the e-commerce example's services, one file each
// (orders.go, payment.go, inventory.go, notification.go, fulfillment.go),
// and the plumbing they share: flags and signals (main.go), the Kafka client
// set-up (client.go), the at-least-once consume loop (consumer.go) and the
// ledger that turns at-least-once delivery into once-only effects
// (ledger.go). The programs under cmd/ only parse flags and call Run*.
//
// # Delivery and effects
//
// Every consumer commits an offset only after the records before it have
// been processed, so a crash never skips an event: it is delivered at least
// once, and after a SIGKILL the records processed since the last commit are
// delivered again. An effect that must happen once per order (charging a
// card, reserving stock, sending an e-mail, packing a box) is therefore
// guarded by the order id: each service appends the ids it has acted on to
// its ledger, reads the ledger back when it starts, and skips an order it
// has already handled.
package service
