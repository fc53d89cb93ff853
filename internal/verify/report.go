package verify

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteText writes the result for people: totals, a table of anomaly
// counts, a few examples of each anomaly found, and the verdict.
func (r *Result) WriteText(w io.Writer) error {
	st := r.Stats
	fmt.Fprintf(w, "topic %s: %d partitions, replication factor %d\n", r.Topic, r.Partitions, r.ReplicationFactor)
	fmt.Fprintf(w, "sent %d: %d acknowledged, %d failed, %d unanswered\n", st.Sent, st.Acknowledged, st.Failed, st.Unanswered)
	fmt.Fprintf(w, "read %d records (%d distinct); %d indeterminate, %d unread, %d fetch errors\n", st.Polled, st.Distinct, st.Indeterminate, st.Unread, st.FetchErrors)
	if t := st.Txns; t != (TxnStats{}) {
		fmt.Fprintf(w, "transactions: %d committed, %d aborted, %d unknown\n", t.Committed, t.Aborted, t.Unknown)
	}
	if t := st.Copies; t != (TxnStats{}) {
		fmt.Fprintf(w, "copy transactions: %d committed, %d aborted, %d unknown; %d inputs copied\n", t.Committed, t.Aborted, t.Unknown, st.Copied)
	}
	if st.LongestEndMillis > 0 {
		fmt.Fprintf(w, "longest end of a transaction: %.1f ms\n", st.LongestEndMillis)
	}
	fmt.Fprintf(w, "longest wait for an acknowledgement: %.1f ms", st.LongestAckGapMillis)
	if st.LongestPartitionAckGapMillis > 0 {
		fmt.Fprintf(w, "; in one partition: %.1f ms (partition %d)", st.LongestPartitionAckGapMillis, st.LongestAckGapPartition)
	}
	fmt.Fprint(w, "\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ANOMALY\tCOUNT")
	for _, a := range r.Anomalies {
		fmt.Fprintf(tw, "%s\t%d\n", a.Kind, a.Count)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, a := range r.Anomalies {
		if a.Count == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s (%d", a.Kind, a.Count)
		if a.Count > len(a.Examples) {
			fmt.Fprintf(w, ", first %d shown", len(a.Examples))
		}
		fmt.Fprintln(w, "):")
		for _, ex := range a.Examples {
			fmt.Fprintf(w, "  %s\n", ex.Text)
		}
	}
	fmt.Fprintln(w)
	for _, warning := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warning)
	}
	if r.Valid {
		_, err := fmt.Fprintln(w, "VALID: no anomalies")
		return err
	}
	_, err := fmt.Fprintf(w, "INVALID: %s\n", r.Summary())
	return err
}
