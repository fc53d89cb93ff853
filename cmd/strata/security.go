package main

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func userCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "user",
		Short: "Create, delete and list SCRAM users (AlterUserScramCredentials, KIP-554)",
	}
	o := addClientFlags(cmd)
	cmd.AddCommand(userCreateCommand(o), userDeleteCommand(o), userListCommand(o))
	return cmd
}

func scramMechanism(name string) (kadm.ScramMechanism, error) {
	switch strings.ToUpper(name) {
	case "SCRAM-SHA-256":
		return kadm.ScramSha256, nil
	case "SCRAM-SHA-512":
		return kadm.ScramSha512, nil
	}
	return 0, fmt.Errorf("--mechanism %q: want SCRAM-SHA-256 or SCRAM-SHA-512", name)
}

func userCreateCommand(o *clientOptions) *cobra.Command {
	var password, mechanism string
	var iterations int32
	cmd := &cobra.Command{
		Use:   "create USER",
		Short: "Create a SCRAM user, or change its password",
		Long:  "Create a SCRAM user, or change its password. The client salts the password; the brokers never see it.",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if password == "" {
				return errors.New("--password is required")
			}
			mech, err := scramMechanism(mechanism)
			if err != nil {
				return err
			}
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: args[0], Mechanism: mech, Iterations: iterations, Password: password}})
			if err == nil {
				err = res.Error()
			}
			if err != nil {
				return o.requestError("creating user "+args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "user %s: %s credential set\n", args[0], mech)
			return nil
		},
	}
	cmd.Flags().StringVar(&password, "password", "", "the user's password")
	cmd.Flags().StringVar(&mechanism, "mechanism", "SCRAM-SHA-256", "SCRAM-SHA-256 or SCRAM-SHA-512")
	cmd.Flags().Int32Var(&iterations, "iterations", 8192, "PBKDF2 iterations, 4096 to 16384")
	return cmd
}

func userDeleteCommand(o *clientOptions) *cobra.Command {
	var mechanism string
	cmd := &cobra.Command{
		Use:   "delete USER",
		Short: "Delete a SCRAM user's credential",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mech, err := scramMechanism(mechanism)
			if err != nil {
				return err
			}
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			res, err := adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: args[0], Mechanism: mech}}, nil)
			if err == nil {
				err = res.Error()
			}
			if err != nil {
				return o.requestError("deleting user "+args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "user %s: %s credential deleted\n", args[0], mech)
			return nil
		},
	}
	cmd.Flags().StringVar(&mechanism, "mechanism", "SCRAM-SHA-256", "SCRAM-SHA-256 or SCRAM-SHA-512")
	return cmd
}

type userEntry struct {
	User       string `json:"user"`
	Mechanism  string `json:"mechanism"`
	Iterations int32  `json:"iterations"`
}

func userListCommand(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List SCRAM users and their mechanisms",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			described, err := adm.DescribeUserSCRAMs(ctx)
			if err == nil {
				err = described.Error()
			}
			if err != nil {
				return o.requestError("listing users", err)
			}
			entries := []userEntry{}
			for _, d := range described.Sorted() {
				for _, ci := range d.CredInfos {
					entries = append(entries, userEntry{User: d.User, Mechanism: ci.Mechanism.String(), Iterations: ci.Iterations})
				}
			}
			w := cmd.OutOrStdout()
			if o.format == "json" {
				return writeJSON(w, entries)
			}
			t := newTable(w, "USER", "MECHANISM", "ITERATIONS")
			for _, e := range entries {
				t.row(e.User, e.Mechanism, e.Iterations)
			}
			return t.flush()
		},
	}
}

func aclCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "acl",
		Short: "Create, list and delete ACLs (CreateAcls, DescribeAcls, DeleteAcls)",
	}
	o := addClientFlags(cmd)
	cmd.AddCommand(aclCreateCommand(o), aclListCommand(o), aclDeleteCommand(o))
	return cmd
}

// aclFlags select or describe ACLs, with kafka-acls' flag names.
type aclFlags struct {
	allow, deny                    []string
	hosts                          []string
	operations                     []string
	topics, groups, transactionIDs []string
	cluster                        bool
	pattern                        string
}

func (f *aclFlags) add(cmd *cobra.Command, filter bool) {
	fl := cmd.Flags()
	fl.StringSliceVar(&f.allow, "allow-principal", nil, "principals allowed, e.g. User:alice (repeatable)")
	fl.StringSliceVar(&f.deny, "deny-principal", nil, "principals denied (repeatable)")
	fl.StringSliceVar(&f.hosts, "host", nil, "hosts the entry applies to (default *)")
	fl.StringSliceVar(&f.operations, "operation", nil, "READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALL")
	fl.StringSliceVar(&f.topics, "topic", nil, "topic resources")
	fl.StringSliceVar(&f.groups, "group", nil, "group resources")
	fl.StringSliceVar(&f.transactionIDs, "transactional-id", nil, "transactional id resources")
	fl.BoolVar(&f.cluster, "cluster", false, "the cluster resource")
	def := "literal"
	if filter {
		def = "any"
	}
	fl.StringVar(&f.pattern, "resource-pattern-type", def, "literal or prefixed (and any or match when selecting)")
}

func (f *aclFlags) builder(filter bool) (*kadm.ACLBuilder, error) {
	b := kadm.NewACLs()
	if len(f.topics) > 0 {
		b = b.Topics(f.topics...)
	}
	if len(f.groups) > 0 {
		b = b.Groups(f.groups...)
	}
	if len(f.transactionIDs) > 0 {
		b = b.TransactionalIDs(f.transactionIDs...)
	}
	if f.cluster {
		b = b.Clusters()
	}
	if len(f.topics)+len(f.groups)+len(f.transactionIDs) == 0 && !f.cluster {
		if !filter {
			return nil, errors.New("name a resource: --topic, --group, --transactional-id or --cluster")
		}
		b = b.AnyResource()
	}
	hosts := f.hosts
	if len(hosts) == 0 {
		hosts = []string{"*"}
	}
	switch {
	case len(f.allow) > 0 || len(f.deny) > 0:
		if len(f.allow) > 0 {
			b = b.Allow(f.allow...).AllowHosts(hosts...)
		}
		if len(f.deny) > 0 {
			b = b.Deny(f.deny...).DenyHosts(hosts...)
		}
	case filter:
		b = b.Allow().AllowHosts().Deny().DenyHosts()
	default:
		return nil, errors.New("name a principal: --allow-principal or --deny-principal")
	}
	var ops []kadm.ACLOperation
	for _, op := range f.operations {
		parsed, err := kmsg.ParseACLOperation(op)
		if err != nil {
			return nil, fmt.Errorf("--operation %s: %w", op, err)
		}
		ops = append(ops, parsed)
	}
	if len(ops) == 0 {
		if !filter {
			return nil, errors.New("--operation is required")
		}
		ops = []kadm.ACLOperation{kadm.OpAny}
	}
	b = b.Operations(ops...)
	pattern, err := kmsg.ParseACLResourcePatternType(f.pattern)
	if err != nil {
		return nil, fmt.Errorf("--resource-pattern-type %s: %w", f.pattern, err)
	}
	return b.ResourcePatternType(pattern), nil
}

type aclEntry struct {
	ResourceType string `json:"resource_type"`
	Resource     string `json:"resource"`
	Pattern      string `json:"pattern"`
	Principal    string `json:"principal"`
	Host         string `json:"host"`
	Operation    string `json:"operation"`
	Permission   string `json:"permission"`
}

func printACLs(cmd *cobra.Command, o *clientOptions, entries []aclEntry) error {
	sort.Slice(entries, func(i, j int) bool {
		a, b := entries[i], entries[j]
		return a.ResourceType+a.Resource+a.Principal+a.Operation < b.ResourceType+b.Resource+b.Principal+b.Operation
	})
	w := cmd.OutOrStdout()
	if o.format == "json" {
		return writeJSON(w, entries)
	}
	t := newTable(w, "RESOURCE-TYPE", "RESOURCE", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION")
	for _, e := range entries {
		t.row(e.ResourceType, e.Resource, e.Pattern, e.Principal, e.Host, e.Operation, e.Permission)
	}
	return t.flush()
}

func aclCreateCommand(o *clientOptions) *cobra.Command {
	f := &aclFlags{}
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create ACLs",
		Example: `  strata acl create --allow-principal User:alice --operation READ --topic orders
  strata acl create --allow-principal User:app --operation WRITE --topic logs- --resource-pattern-type prefixed
  strata acl create --deny-principal User:mallory --operation ALL --cluster`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := f.builder(false)
			if err != nil {
				return err
			}
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			results, err := adm.CreateACLs(ctx, b)
			if err != nil {
				return o.requestError("creating ACLs", err)
			}
			var entries []aclEntry
			for _, r := range results {
				if r.Err != nil {
					return o.requestError("creating ACLs", r.Err)
				}
				entries = append(entries, aclEntry{r.Type.String(), r.Name, r.Pattern.String(), r.Principal, r.Host, r.Operation.String(), r.Permission.String()})
			}
			return printACLs(cmd, o, entries)
		},
	}
	f.add(cmd, false)
	return cmd
}

func aclListCommand(o *clientOptions) *cobra.Command {
	f := &aclFlags{}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List ACLs, all or those the flags select",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := f.builder(true)
			if err != nil {
				return err
			}
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			results, err := adm.DescribeACLs(ctx, b)
			if err != nil {
				return o.requestError("listing ACLs", err)
			}
			seen := map[aclEntry]bool{}
			entries := []aclEntry{}
			for _, r := range results {
				if r.Err != nil {
					return o.requestError("listing ACLs", r.Err)
				}
				for _, d := range r.Described {
					e := aclEntry{d.Type.String(), d.Name, d.Pattern.String(), d.Principal, d.Host, d.Operation.String(), d.Permission.String()}
					if !seen[e] {
						seen[e] = true
						entries = append(entries, e)
					}
				}
			}
			return printACLs(cmd, o, entries)
		},
	}
	f.add(cmd, true)
	return cmd
}

func aclDeleteCommand(o *clientOptions) *cobra.Command {
	f := &aclFlags{}
	cmd := &cobra.Command{
		Use:   "delete",
		Short: "Delete the ACLs the flags select",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := f.builder(true)
			if err != nil {
				return err
			}
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			results, err := adm.DeleteACLs(ctx, b)
			if err != nil {
				return o.requestError("deleting ACLs", err)
			}
			seen := map[aclEntry]bool{}
			entries := []aclEntry{}
			for _, r := range results {
				if r.Err != nil {
					return o.requestError("deleting ACLs", r.Err)
				}
				for _, d := range r.Deleted {
					e := aclEntry{d.Type.String(), d.Name, d.Pattern.String(), d.Principal, d.Host, d.Operation.String(), d.Permission.String()}
					if !seen[e] {
						seen[e] = true
						entries = append(entries, e)
					}
				}
			}
			return printACLs(cmd, o, entries)
		},
	}
	f.add(cmd, true)
	return cmd
}
