package broker

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// TestListTransactionsPattern is KIP-1152: ListTransactions v2 filters by a
// regular expression that must match the whole transactional id, through
// kadm (a real client) and raw requests for what kadm does not send.
func TestListTransactionsPattern(t *testing.T) {
	tb := startBroker(t, txnSettings)
	adm := newAdmin(t, tb.Addr())
	createTopic(t, adm, "ltp", 1, nil)
	ids := []string{"orders-1", "orders-2", "payments-1", "xorders-1"}
	for _, id := range ids {
		cl := newClient(t, tb.Addr(), kgo.TransactionalID(id), kgo.DefaultProduceTopic("ltp"))
		produceTxn(t, cl, "ltp", id, 1, true)
	}
	ctx := testContext(t)
	listed := func(pattern string) []string {
		t.Helper()
		l, err := adm.ListTransactionsByTxPattern(ctx, nil, nil, pattern)
		if err != nil {
			t.Fatalf("ListTransactions pattern %q: %v", pattern, err)
		}
		var out []string
		for _, e := range l.Sorted() {
			out = append(out, e.TxnID)
		}
		return out
	}
	poll.UntilStatus(t, 30*time.Second, "every id is listed", func() (bool, string) {
		got := listed("")
		return slices.Equal(got, ids), fmt.Sprint("listed ", got)
	})
	for _, c := range []struct {
		pattern string
		want    []string
	}{
		{"orders-.*", []string{"orders-1", "orders-2"}}, // whole id: not xorders-1
		{"orders", nil}, // a substring is not a match
		{".*-1", []string{"orders-1", "payments-1", "xorders-1"}},
		{"orders-1|payments-1", []string{"orders-1", "payments-1"}}, // the alternation stays inside the anchors
		{"x?orders-[2-9]", []string{"orders-2"}},
	} {
		if got := listed(c.pattern); !slices.Equal(got, c.want) {
			t.Errorf("pattern %q listed %v, want %v", c.pattern, got, c.want)
		}
	}

	raw := func(version int16, pattern *string) *kmsg.ListTransactionsResponse {
		req := kmsg.NewPtrListTransactionsRequest()
		req.Version, req.TransactionalIDPattern = version, pattern
		return rawRequest(t, tb.Addr(), req).(*kmsg.ListTransactionsResponse)
	}
	// Not RE2 (a Java lookahead), and a pattern that compiles only once
	// wrapped in the anchors: both refused, not widened.
	for _, bad := range []string{"(?=orders).*", "a)|(b", "[z-a]"} {
		if resp := raw(2, kmsg.StringPtr(bad)); resp.ErrorCode != kerr.InvalidRegularExpression.Code || len(resp.TransactionStates) != 0 {
			t.Errorf("pattern %q: %v with %d states, want INVALID_REGULAR_EXPRESSION", bad, kerr.ErrorForCode(resp.ErrorCode), len(resp.TransactionStates))
		}
	}
	// A null pattern lists everything.
	if resp := raw(2, nil); resp.ErrorCode != 0 || len(resp.TransactionStates) != len(ids) {
		t.Errorf("null pattern: %v, %d states", kerr.ErrorForCode(resp.ErrorCode), len(resp.TransactionStates))
	}
	// v2 is advertised.
	versions := rawRequest(t, tb.Addr(), kmsg.NewPtrApiVersionsRequest()).(*kmsg.ApiVersionsResponse)
	for _, k := range versions.ApiKeys {
		if k.ApiKey == kmsg.ListTransactions.Int16() && k.MaxVersion != 2 {
			t.Errorf("ListTransactions advertised up to v%d, want v2", k.MaxVersion)
		}
	}
}
