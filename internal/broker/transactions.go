package broker

import (
	"context"
	"regexp"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/txn"
	"github.com/strata-io/strata/internal/wire"
)

// DescribeTransactions: v0. ListTransactions: v0-2 (KIP-664, KIP-994,
// KIP-1152).
//
// Behavior:
// * DescribeTransactions answers the transactional ids this broker
// coordinates (NOT_COORDINATOR for the others, COORDINATOR_LOAD_IN_PROGRESS
// while their partition loads, TRANSACTIONAL_ID_NOT_FOUND for unknown ids).
// * ListTransactions lists the ids of the __transaction_state partitions
// loaded here, filtered by state, producer id and (v1+) a minimum running
// time, and (v2+) a transactional id pattern; unknown state names come
// back in UnknownStateFilters. Clients ask every broker.
// * The v2 pattern must match the whole transactional id, as Kafka's
// Matcher.matches() does, but it is Go's RE2 syntax, not Java's: no
// backreferences, lookaround, possessive quantifiers or atomic groups
// (they are INVALID_REGULAR_EXPRESSION here, a pattern Java would take),
// and matching takes linear time whatever the pattern. An empty or null
// pattern matches every id, as in Kafka.
func init() {
	register(api{key: kmsg.DescribeTransactions, min: 0, max: 0, handle: (*Broker).handleDescribeTransactions,
		authorize: authorizeDescribeTransactions, errors: describeTransactionsErrors, quota: requestTime})
	register(api{key: kmsg.ListTransactions, min: 0, max: 2, handle: (*Broker).handleListTransactions,
		authorize: authorizeListTransactions, errors: listTransactionsErrors, quota: requestTime})
}

// transactionalIDPattern compiles a ListTransactions v2 pattern to match
// whole ids; nil for none.
func transactionalIDPattern(r *kmsg.ListTransactionsRequest) (*regexp.Regexp, error) {
	if r.Version < 2 || r.TransactionalIDPattern == nil || *r.TransactionalIDPattern == "" {
		return nil, nil
	}
	// Compiled alone first: wrapped, "a)|(b" would compile and mean
	// something else.
	if _, err := regexp.Compile(*r.TransactionalIDPattern); err != nil {
		return nil, err
	}
	return regexp.Compile(`^(?:` + *r.TransactionalIDPattern + `)$`)
}

func (b *Broker) handleDescribeTransactions(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.DescribeTransactionsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	for _, id := range r.TransactionalIDs {
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID = id
		st.ProducerID, st.ProducerEpoch = -1, -1
		md, err := b.txns.Describe(id)
		if err != nil {
			st.ErrorCode = errorCode(err)
			resp.TransactionStates = append(resp.TransactionStates, st)
			continue
		}
		st.State = md.State.String()
		st.TimeoutMillis, st.StartTimestamp = md.TimeoutMs, md.StartMs
		st.ProducerID, st.ProducerEpoch = md.ProducerID, md.ProducerEpoch
		for _, tp := range md.Partitions {
			if n := len(st.Topics); n > 0 && st.Topics[n-1].Topic == tp.Topic {
				st.Topics[n-1].Partitions = append(st.Topics[n-1].Partitions, tp.Partition)
				continue
			}
			t := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
			t.Topic, t.Partitions = tp.Topic, []int32{tp.Partition}
			st.Topics = append(st.Topics, t)
		}
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return respond(resp)
}

func (b *Broker) handleListTransactions(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.ListTransactionsRequest)
	resp := r.ResponseKind().(*kmsg.ListTransactionsResponse)
	var states []txn.State
	for _, name := range r.StateFilters {
		s, ok := txn.ParseState(name)
		if !ok {
			resp.UnknownStateFilters = append(resp.UnknownStateFilters, name)
			continue
		}
		states = append(states, s)
	}
	pattern, err := transactionalIDPattern(r)
	if err != nil {
		resp.ErrorCode = kerr.InvalidRegularExpression.Code
		return respond(resp)
	}
	if len(r.StateFilters) > 0 && len(states) == 0 {
		return respond(resp)
	}
	all, loading := b.txns.List()
	if loading {
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		return respond(resp)
	}
	now := b.now().UnixMilli()
	for _, md := range all {
		switch {
		case len(states) > 0 && !slices.Contains(states, md.State):
			continue
		case len(r.ProducerIDFilters) > 0 && !slices.Contains(r.ProducerIDFilters, md.ProducerID):
			continue
		case r.Version >= 1 && r.DurationFilterMillis >= 0 && (md.StartMs < 0 || now-md.StartMs < r.DurationFilterMillis):
			continue
		case pattern != nil && !pattern.MatchString(md.TransactionalID):
			continue
		}
		ts := kmsg.NewListTransactionsResponseTransactionState()
		ts.TransactionalID, ts.ProducerID, ts.TransactionState = md.TransactionalID, md.ProducerID, md.State.String()
		resp.TransactionStates = append(resp.TransactionStates, ts)
	}
	return respond(resp)
}

// describeTransactionsErrors answers each transactional id req names with
// code.
func describeTransactionsErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	out := resp.(*kmsg.DescribeTransactionsResponse)
	for _, id := range req.(*kmsg.DescribeTransactionsRequest).TransactionalIDs {
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID, st.ErrorCode, st.ProducerID, st.ProducerEpoch = id, code, -1, -1
		out.TransactionStates = append(out.TransactionStates, st)
	}
}

func listTransactionsErrors(_ kmsg.Request, resp kmsg.Response, code int16) {
	resp.(*kmsg.ListTransactionsResponse).ErrorCode = code
}
