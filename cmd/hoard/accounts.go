package main

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hoardproject/hoard/accounts"
	"github.com/hoardproject/hoard/server"
)

// accountCommand is `hoard account add|list|set|remove` (admin only).
func accountCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "account",
		Short: "Operators' accounts and their roles (admin only)",
		Long: `Roles: admin (everything, accounts included); project-admin:<project>
(everything about that project); viewer:<project> or viewer:* (read-only
admin views); plugin:<name>:<scope> (the part of a plugin's admin API the
plugin opens to that scope). Give several with --role more than once.`,
	}
	var roles []string
	add := &cobra.Command{
		Use:   "add <name> --role ROLE [--role ROLE …]",
		Short: "Add an account",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var acct accounts.Account
			if err := newAdminClient().do(cmd.Context(), http.MethodPost, "/accounts",
				server.AccountRequest{Name: args[0], Roles: roles}, &acct); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "added %s (%s); give it a token with: hoard token create <name> --account %s\n",
				acct.Name, strings.Join(acct.Roles, ", "), acct.Name)
			return nil
		},
	}
	add.Flags().StringArrayVar(&roles, "role", nil, "a role (repeatable)")
	set := &cobra.Command{
		Use:   "set <name> --role ROLE [--role ROLE …]",
		Short: "Replace an account's roles",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var acct accounts.Account
			if err := newAdminClient().do(cmd.Context(), http.MethodPatch, "/accounts/"+url.PathEscape(args[0]),
				server.AccountRequest{Roles: roles}, &acct); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", acct.Name, rolesText(acct.Roles))
			return nil
		},
	}
	set.Flags().StringArrayVar(&roles, "role", nil, "a role (repeatable; none leaves the account with no role)")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the accounts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var reply struct {
				Accounts []accounts.Account `json:"accounts"`
			}
			if err := newAdminClient().do(cmd.Context(), http.MethodGet, "/accounts", nil, &reply); err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ACCOUNT\tROLES\tCREATED")
			for _, a := range reply.Accounts {
				fmt.Fprintf(w, "%s\t%s\t%s\n", a.Name, rolesText(a.Roles), a.CreatedAt.Format(time.DateTime))
			}
			return w.Flush()
		},
	}
	remove := &cobra.Command{
		Use:   "remove <name>",
		Short: "Remove an account and revoke its tokens",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var reply struct {
				Revoked int `json:"tokens_revoked"`
			}
			if err := newAdminClient().do(cmd.Context(), http.MethodDelete, "/accounts/"+url.PathEscape(args[0]), nil, &reply); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %s and revoked its %d token(s)\n", args[0], reply.Revoked)
			return nil
		},
	}
	cmd.AddCommand(add, set, list, remove)
	return cmd
}

func rolesText(roles []string) string {
	if len(roles) == 0 {
		return "(no role)"
	}
	return strings.Join(roles, ", ")
}

// tokenCommand is `hoard token create|list|revoke`: any account manages
// its own tokens, an admin anyone's.
func tokenCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "API tokens: yours, or (admin) any account's",
	}
	var account string
	var expires time.Duration
	create := &cobra.Command{
		Use:   "create <name> [--account A] [--expires-in 720h]",
		Short: "Create a token; it is printed once and cannot be shown again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var reply server.NewToken
			if err := newAdminClient().do(cmd.Context(), http.MethodPost, "/tokens",
				map[string]any{"name": args[0], "account": account, "expires_in": expires.String()}, &reply); err != nil {
				return err
			}
			// The token goes to stdout alone, so `$(hoard token create …)`
			// captures it; the rest to stderr.
			fmt.Fprintln(cmd.OutOrStdout(), reply.Secret)
			expiry := "never expires"
			if reply.ExpiresAt != nil {
				expiry = "expires " + reply.ExpiresAt.Format(time.DateTime) + " UTC"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "token %s (id %s) of %s, %s. It is shown this once: keep it now.\n",
				reply.Name, reply.ID, reply.Account, expiry)
			return nil
		},
	}
	create.Flags().StringVar(&account, "account", "", "the account the token is for (default: yours; another's: admin only)")
	create.Flags().DurationVar(&expires, "expires-in", 0, "the token stops working after this long (default: never)")
	var listAccount string
	list := &cobra.Command{
		Use:   "list [--account A]",
		Short: "List tokens (never the tokens themselves): yours, or for an admin every account's",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var reply struct {
				Tokens []accounts.Token `json:"tokens"`
			}
			path := "/tokens"
			if listAccount != "" {
				path += "?account=" + url.QueryEscape(listAccount)
			}
			if err := newAdminClient().do(cmd.Context(), http.MethodGet, path, nil, &reply); err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tACCOUNT\tNAME\tCREATED\tEXPIRES\tLAST USED")
			for _, t := range reply.Tokens {
				expires, used := "never", "never"
				if t.ExpiresAt != nil {
					expires = t.ExpiresAt.Format(time.DateTime)
					if t.Expired {
						expires += " (expired)"
					}
				}
				if t.LastUsed != nil {
					used = t.LastUsed.Format(time.DateTime)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Account, t.Name, t.CreatedAt.Format(time.DateTime), expires, used)
			}
			return w.Flush()
		},
	}
	list.Flags().StringVar(&listAccount, "account", "", "only this account's tokens")
	revoke := &cobra.Command{
		Use:   "revoke <id>",
		Short: "Revoke a token (its id, from token list)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := newAdminClient().do(cmd.Context(), http.MethodDelete, "/tokens/"+url.PathEscape(args[0]), nil, nil); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "revoked", args[0])
			return nil
		},
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}
