package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
)

func quotaCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Alter and describe client quotas (AlterClientQuotas, DescribeClientQuotas)",
	}
	o := addClientFlags(cmd)
	cmd.AddCommand(quotaAlterCommand(o), quotaDescribeCommand(o))
	return cmd
}

// quotaEntityFlags name an entity as kafka-configs does: --user and
// --client-id with a name, or --user-default / --client-default; or --ip
// / --ip-default alone.
type quotaEntityFlags struct {
	user, clientID, ip                    string
	userDefault, clientDefault, ipDefault bool
}

func (f *quotaEntityFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.user, "user", "", "the user (principal name) the quota applies to")
	cmd.Flags().StringVar(&f.clientID, "client-id", "", "the client id the quota applies to")
	cmd.Flags().BoolVar(&f.userDefault, "user-default", false, "the default for users without a quota of their own")
	cmd.Flags().BoolVar(&f.clientDefault, "client-default", false, "the default for client ids without a quota of their own")
	cmd.Flags().StringVar(&f.ip, "ip", "", "the client IP address the quota (connection_creation_rate) applies to")
	cmd.Flags().BoolVar(&f.ipDefault, "ip-default", false, "the default for IP addresses without a quota of their own")
}

func (f *quotaEntityFlags) entity() (kadm.ClientQuotaEntity, error) {
	var e kadm.ClientQuotaEntity
	for _, c := range []struct {
		typ, name, nameFlag, defaultFlag string
		isDefault                        bool
	}{
		{"user", f.user, "--user", "--user-default", f.userDefault},
		{"client-id", f.clientID, "--client-id", "--client-default", f.clientDefault},
		{"ip", f.ip, "--ip", "--ip-default", f.ipDefault},
	} {
		switch {
		case c.name != "" && c.isDefault:
			return nil, fmt.Errorf("give %s or %s, not both", c.nameFlag, c.defaultFlag)
		case c.typ == "ip" && (c.name != "" || c.isDefault) && len(e) > 0:
			return nil, errors.New("an IP's quota stands alone: give --ip or --ip-default without --user or --client-id")
		case c.name != "":
			name := c.name
			e = append(e, kadm.ClientQuotaEntityComponent{Type: c.typ, Name: &name})
		case c.isDefault:
			e = append(e, kadm.ClientQuotaEntityComponent{Type: c.typ})
		}
	}
	return e, nil
}

func quotaAlterCommand(o *clientOptions) *cobra.Command {
	var ef quotaEntityFlags
	var sets, removes []string
	cmd := &cobra.Command{
		Use:   "alter",
		Short: "Set or remove quotas of a user, a client id, both, or an IP address",
		Example: `  strata quota alter --client-id batch-loader --set producer_byte_rate=1048576
  strata quota alter --user alice --client-default --set consumer_byte_rate=5242880
  strata quota alter --client-id batch-loader --remove producer_byte_rate
  strata quota alter --ip-default --set connection_creation_rate=50`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			entity, err := ef.entity()
			if err != nil {
				return err
			}
			if len(entity) == 0 {
				return errors.New("name an entity: --user, --user-default, --client-id, --client-default, --ip or --ip-default")
			}
			var ops []kadm.AlterClientQuotaOp
			for _, s := range sets {
				k, v, ok := strings.Cut(s, "=")
				value, err := strconv.ParseFloat(v, 64)
				if !ok || err != nil {
					return fmt.Errorf("--set %q: want key=number", s)
				}
				ops = append(ops, kadm.AlterClientQuotaOp{Key: k, Value: value})
			}
			for _, k := range removes {
				ops = append(ops, kadm.AlterClientQuotaOp{Key: k, Remove: true})
			}
			if len(ops) == 0 {
				return errors.New("nothing to do: give --set key=value or --remove key")
			}
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			res, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{Entity: entity, Ops: ops}})
			if err != nil {
				return o.requestError("altering quotas", err)
			}
			for _, r := range res {
				if r.Err != nil {
					return o.requestError("altering quotas of "+r.Entity.String(), r.Err)
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "quotas of %s altered\n", entity)
			return nil
		},
	}
	ef.add(cmd)
	cmd.Flags().StringSliceVar(&sets, "set", nil, "key=value: producer_byte_rate, consumer_byte_rate (bytes a second), request_percentage (of one handler thread); connection_creation_rate (connections a second) for --ip")
	cmd.Flags().StringSliceVar(&removes, "remove", nil, "quota keys to remove")
	return cmd
}

type quotaEntry struct {
	Entity string             `json:"entity"`
	Values map[string]float64 `json:"values"`
}

func quotaDescribeCommand(o *clientOptions) *cobra.Command {
	var ef quotaEntityFlags
	cmd := &cobra.Command{
		Use:     "describe",
		Aliases: []string{"list"},
		Short:   "Describe quotas: all, or those of the entity named",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			entity, err := ef.entity()
			if err != nil {
				return err
			}
			var components []kadm.DescribeClientQuotaComponent
			for _, c := range entity {
				dc := kadm.DescribeClientQuotaComponent{Type: c.Type, MatchName: c.Name, MatchType: 0}
				if c.Name == nil {
					dc.MatchType = 1
				}
				components = append(components, dc)
			}
			strict := len(components) > 0
			if len(components) == 0 {
				components = []kadm.DescribeClientQuotaComponent{{Type: "user", MatchType: 2}}
			}
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			described, err := adm.DescribeClientQuotas(ctx, strict, components)
			if err != nil {
				return o.requestError("describing quotas", err)
			}
			if len(entity) == 0 {
				// Also the entities without a user.
				more, err := adm.DescribeClientQuotas(ctx, true, []kadm.DescribeClientQuotaComponent{{Type: "client-id", MatchType: 2}})
				if err != nil {
					return o.requestError("describing quotas", err)
				}
				described = append(described, more...)
				ips, err := adm.DescribeClientQuotas(ctx, true, []kadm.DescribeClientQuotaComponent{{Type: "ip", MatchType: 2}})
				if err != nil {
					return o.requestError("describing quotas", err)
				}
				described = append(described, ips...)
			}
			entries := []quotaEntry{}
			for _, d := range described {
				e := quotaEntry{Entity: d.Entity.String(), Values: map[string]float64{}}
				for _, v := range d.Values {
					e.Values[v.Key] = v.Value
				}
				entries = append(entries, e)
			}
			w := cmd.OutOrStdout()
			if o.format == "json" {
				return writeJSON(w, entries)
			}
			t := newTable(w, "ENTITY", "KEY", "VALUE")
			for _, d := range described {
				for _, v := range d.Values {
					t.row(d.Entity.String(), v.Key, strconv.FormatFloat(v.Value, 'f', -1, 64))
				}
			}
			return t.flush()
		},
	}
	ef.add(cmd)
	return cmd
}
