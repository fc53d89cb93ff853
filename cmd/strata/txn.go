package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func txnCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "txn",
		Short: "List and describe transactions (transactional ids)",
	}
	o := addClientFlags(cmd)
	cmd.AddCommand(txnListCommand(o), txnDescribeCommand(o))
	return cmd
}

type txnListEntry struct {
	TransactionalID string `json:"transactional_id"`
	ProducerID      int64  `json:"producer_id"`
	State           string `json:"state"`
	Coordinator     int32  `json:"coordinator"`
}

func txnListCommand(o *clientOptions) *cobra.Command {
	var states []string
	var pattern string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List transactional ids and the state of their transaction (ListTransactions)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			listed, err := adm.ListTransactionsByTxPattern(ctx, nil, states, pattern)
			if err != nil {
				return o.requestError("listing transactions", err)
			}
			entries := []txnListEntry{}
			for _, l := range listed.Sorted() {
				entries = append(entries, txnListEntry{l.TxnID, l.ProducerID, l.State, l.Coordinator})
			}
			w := cmd.OutOrStdout()
			if o.format == "json" {
				return writeJSON(w, entries)
			}
			t := newTable(w, "TRANSACTIONAL-ID", "PRODUCER-ID", "STATE", "COORDINATOR")
			for _, e := range entries {
				t.row(e.TransactionalID, e.ProducerID, e.State, e.Coordinator)
			}
			return t.flush()
		},
	}
	cmd.Flags().StringSliceVar(&states, "state", nil, "only these states (Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort)")
	cmd.Flags().StringVar(&pattern, "pattern", "", "only the transactional ids this regular expression matches whole (RE2 syntax; ListTransactions v2, KIP-1152)")
	return cmd
}

type txnDescribeEntry struct {
	TransactionalID string `json:"transactional_id"`
	Coordinator     int32  `json:"coordinator"`
	State           string `json:"state"`
	ProducerID      int64  `json:"producer_id"`
	ProducerEpoch   int16  `json:"producer_epoch"`
	TimeoutMs       int32  `json:"timeout_ms"`
	// StartTime is when the open transaction began, empty when none.
	StartTime  string   `json:"start_time,omitempty"`
	Partitions []string `json:"partitions"`
	Error      string   `json:"error,omitempty"`
}

func txnDescribeCommand(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "describe TRANSACTIONAL-ID...",
		Short: "Describe transactional ids: producer id and epoch, state, open transaction's partitions (DescribeTransactions)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			described, err := adm.DescribeTransactions(ctx, args...)
			if err != nil && len(described) == 0 {
				return o.requestError("describing transactions", err)
			}
			entries := []txnDescribeEntry{}
			for _, d := range described.Sorted() {
				e := txnDescribeEntry{TransactionalID: d.TxnID, Coordinator: d.Coordinator, State: d.State,
					ProducerID: d.ProducerID, ProducerEpoch: d.ProducerEpoch, TimeoutMs: d.TimeoutMillis, Partitions: []string{}}
				if d.Err != nil {
					e.Error = d.Err.Error()
				}
				if d.StartTimestamp >= 0 && d.State == "Ongoing" {
					e.StartTime = time.UnixMilli(d.StartTimestamp).UTC().Format(time.RFC3339Nano)
				}
				d.Topics.Each(func(t string, p int32) { e.Partitions = append(e.Partitions, fmt.Sprintf("%s[%d]", t, p)) })
				slices.Sort(e.Partitions)
				entries = append(entries, e)
			}
			w := cmd.OutOrStdout()
			if o.format == "json" {
				return writeJSON(w, entries)
			}
			t := newTable(w, "TRANSACTIONAL-ID", "COORDINATOR", "STATE", "PRODUCER-ID", "EPOCH", "TIMEOUT-MS", "STARTED", "PARTITIONS", "ERROR")
			for _, e := range entries {
				t.row(e.TransactionalID, e.Coordinator, e.State, e.ProducerID, e.ProducerEpoch, e.TimeoutMs,
					orDash(e.StartTime), orDash(strings.Join(e.Partitions, ",")), orDash(e.Error))
			}
			return t.flush()
		},
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
