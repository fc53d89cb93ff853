package broker

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/wire"
)

// Authorization rules of the transaction admin APIs and
// DescribeTopicPartitions, as KafkaApis has them (see authz.go).

// authorizeTxnOffsetCommit: WRITE on the transactional id and READ on the
// group, or the whole request is refused; the partitions of topics it may
// not READ are TOPIC_AUTHORIZATION_FAILED and the others committed, as
// KafkaApis does.
func authorizeTxnOffsetCommit(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.TxnOffsetCommitRequest)
	code := int16(0)
	switch {
	case !a.can(auth.OpWrite, auth.ResourceTransactionalID, r.TransactionalID):
		code = txnDenied
	case !a.group(auth.OpRead, r.Group):
		code = groupDenied
	}
	if code != 0 {
		resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		resp.SetVersion(req.Version)
		resp.Topics = txnOffsetCommitErrors(r.Topics, code)
		return respond(resp)
	}
	kept, denied := split(r.Topics, func(t kmsg.TxnOffsetCommitRequestTopic) bool { return a.topic(auth.OpRead, t.Topic) })
	if len(denied) == 0 {
		return next(b, ctx, c, req)
	}
	r.Topics = kept
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
		resp := body.(*kmsg.TxnOffsetCommitResponse)
		resp.Topics = append(resp.Topics, txnOffsetCommitErrors(denied, topicDenied)...)
	})
}

// txnOffsetCommitErrors answers each partition of topics with code.
func txnOffsetCommitErrors(topics []kmsg.TxnOffsetCommitRequestTopic, code int16) []kmsg.TxnOffsetCommitResponseTopic {
	var out []kmsg.TxnOffsetCommitResponseTopic
	for _, t := range topics {
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		out = append(out, rt)
	}
	return out
}

// authorizeDescribeTransactions: DESCRIBE on each transactional id; the
// partitions of topics the principal may not DESCRIBE are left out of the
// transactions it may, as KafkaApis does.
func authorizeDescribeTransactions(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.DescribeTransactionsRequest)
	kept, denied := split(r.TransactionalIDs, func(id string) bool {
		return a.can(auth.OpDescribe, auth.ResourceTransactionalID, id)
	})
	r.TransactionalIDs = kept
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
		resp := body.(*kmsg.DescribeTransactionsResponse)
		for i := range resp.TransactionStates {
			st := &resp.TransactionStates[i]
			st.Topics = slices.DeleteFunc(st.Topics, func(t kmsg.DescribeTransactionsResponseTransactionStateTopic) bool {
				return !a.topic(auth.OpDescribe, t.Topic)
			})
		}
		for _, id := range denied {
			st := kmsg.NewDescribeTransactionsResponseTransactionState()
			st.TransactionalID, st.ErrorCode, st.ProducerID, st.ProducerEpoch = id, txnDenied, -1, -1
			resp.TransactionStates = append(resp.TransactionStates, st)
		}
	})
}

// authorizeListTransactions leaves out the transactions the principal may
// not DESCRIBE.
func authorizeListTransactions(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
		resp := body.(*kmsg.ListTransactionsResponse)
		kept := resp.TransactionStates[:0]
		for _, st := range resp.TransactionStates {
			if a.can(auth.OpDescribe, auth.ResourceTransactionalID, st.TransactionalID) {
				kept = append(kept, st)
			}
		}
		resp.TransactionStates = kept
	})
}

// authorizeDescribeTopicPartitions: DESCRIBE on each topic, answered
// TOPIC_AUTHORIZATION_FAILED whether it exists or not.
func authorizeDescribeTopicPartitions(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.DescribeTopicPartitionsRequest)
	if len(r.Topics) == 0 {
		return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
			resp := body.(*kmsg.DescribeTopicPartitionsResponse)
			kept := resp.Topics[:0]
			for _, t := range resp.Topics {
				if t.Topic != nil && a.topic(auth.OpDescribe, *t.Topic) {
					kept = append(kept, t)
				}
			}
			resp.Topics = kept
		})
	}
	kept, denied := split(r.Topics, func(t kmsg.DescribeTopicPartitionsRequestTopic) bool { return a.topic(auth.OpDescribe, t.Topic) })
	if len(denied) == 0 {
		return next(b, ctx, c, req)
	}
	r.Topics = kept
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
		resp := body.(*kmsg.DescribeTopicPartitionsResponse)
		for _, d := range denied {
			t := kmsg.NewDescribeTopicPartitionsResponseTopic()
			name := d.Topic
			t.Topic, t.ErrorCode = &name, topicDenied
			resp.Topics = append(resp.Topics, t)
		}
	})
}
