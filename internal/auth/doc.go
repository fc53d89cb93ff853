// Package auth is Strata's security: TLS configuration for listeners and
// inter-broker clients (from Kafka's ssl.* keys, PEM only), the principal
// a connection acts as (from its client certificate or its SASL
// exchange), the SASL mechanisms PLAIN and SCRAM-SHA-256/512 as servers,
// and the ACL authorizer with Kafka's StandardAuthorizer semantics.
//
// The SASL exchanges and the authorizer are plain data: a server exchange
// takes the client's message and returns the reply or an error, the
// authorizer takes an ACL set and a request and answers allow or deny.
// Sockets, clocks and the metadata log stay in the broker.
package auth
