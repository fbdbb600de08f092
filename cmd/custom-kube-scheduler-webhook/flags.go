package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
)

// settingType is what a setting's flag takes. The flag checks the form of a value as it
// is given (a bad one stops serve with pflag's message naming the flag, the value and
// what it wants); loadServeConfig checks ranges, for flags and environment alike.
type settingType struct {
	// name is shown in the help, after the flag.
	name string
	// want completes "want ..." in the error message.
	want string
	// check says whether a value has the form.
	check func(string) error
	// noValue is what the flag alone means (--converge: on); empty: a value is needed.
	noValue string
}

var (
	durationType = settingType{name: "duration", want: "a duration such as 30s or 5m", check: func(s string) error {
		_, err := time.ParseDuration(s)
		return err
	}}
	intType = settingType{name: "int", want: "an integer", check: func(s string) error {
		_, err := strconv.Atoi(s)
		return err
	}}
	quantityType = settingType{name: "bytes", want: "a byte quantity such as 24Mi", check: func(s string) error {
		_, err := resource.ParseQuantity(s)
		return err
	}}
	switchType = settingType{name: "on|off", want: "on or off (true and false are taken too)", noValue: "on", check: func(s string) error {
		switch strings.ToLower(s) {
		case "on", "off", "true", "false":
			return nil
		}
		return fmt.Errorf("not on or off")
	}}
	logLevelType = settingType{name: "level", want: "trace, debug, info, warn or error", check: func(s string) error {
		_, err := logrus.ParseLevel(s)
		return err
	}}
)

func enumType(values ...string) settingType {
	return settingType{name: strings.Join(values, "|"), want: strings.Join(values, " or "), check: func(s string) error {
		for _, v := range values {
			if strings.EqualFold(s, v) {
				return nil
			}
		}
		return fmt.Errorf("not one of %s", strings.Join(values, ", "))
	}}
}

// settingTypes are the settings whose flag takes more than any string.
var settingTypes = map[string]settingType{
	"log-level":                         logLevelType,
	"reservation-ttl":                   durationType,
	"validation-mode":                   enumType("reject", "warn"),
	"cert-mode":                         enumType("file", "self"),
	"shutdown-drain":                    durationType,
	"max-inflight-admissions":           intType,
	"max-inflight-body-bytes":           quantityType,
	"converge":                          switchType,
	"fallback-after":                    durationType,
	"fallback-cooldown":                 durationType,
	"min-fallback-stay":                 durationType,
	"profiling":                         switchType,
	"admission-deadline":                durationType,
	"image-architectures":               switchType,
	"image-lookup-budget":               durationType,
	"image-pull-secrets":                switchType,
	"on-demand-accepts-reserved":        switchType,
	"interruption-window":               durationType,
	"interruption-risk-min-nodes":       intType,
	"interruption-move-signalled-nodes": switchType,
}

// settingGroups order serve's help by purpose; a setting in none is listed under Other.
var settingGroups = []struct {
	title string
	keys  []string
}{
	{"Logging and scope", []string{"log-level", "blocklisted-namespace-list", "webhook-namespace"}},
	{"Listener and certificates", []string{"listen-address", "tls-cert-file", "tls-key-file", "cert-mode", "cert-secret-name",
		"service-name", "mutating-webhook-configuration", "validating-webhook-configuration", "shutdown-drain", "profiling"}},
	{"Kubernetes and AWS", []string{"kubeconfig", "owner-deployment", "eks-cluster-name"}},
	{"Admission", []string{"validation-mode", "admission-deadline", "max-inflight-admissions", "max-inflight-body-bytes",
		"on-demand-accepts-reserved"}},
	{"Image architectures", []string{"image-architectures", "image-lookup-budget",
		"image-pull-secrets", "image-insecure-registries", "image-internal-registries", "image-refused-networks"}},
	{"Seat ledger", []string{"reservation-ttl", "peer-address"}},
	{"Convergence and capacity fallback", []string{"converge", "fallback-after", "fallback-cooldown", "converge-max-unavailable",
		"move-window", "min-fallback-stay"}},
	{"Interruption signals", []string{"interruption-queue", "interruption-window", "interruption-risk-share", "interruption-risk-min-nodes", "interruption-move-signalled-nodes"}},
}

// typedValue is a flag value of one settingType; it keeps the string as given, which is
// what loadServeConfig reads through Viper.
type typedValue struct {
	value string
	typ   settingType
}

func (v *typedValue) String() string { return v.value }
func (v *typedValue) Type() string   { return v.typ.name }

func (v *typedValue) Set(s string) error {
	if err := v.typ.check(strings.TrimSpace(s)); err != nil {
		return fmt.Errorf("want %s", v.typ.want)
	}
	v.value = s
	return nil
}

func addSettingFlags(flags *pflag.FlagSet, settings []setting) {
	for _, s := range settings {
		usage := fmt.Sprintf("%s (env %s)", s.usage, s.env)
		typ, ok := settingTypes[s.key]
		if !ok {
			flags.String(s.key, s.def, usage)
			continue
		}
		f := flags.VarPF(&typedValue{value: s.def, typ: typ}, s.key, "", usage)
		f.NoOptDefVal = typ.noValue
	}
}

// groupedHelp prints serve's help with its flags grouped by purpose.
func groupedHelp(cmd *cobra.Command, _ []string) {
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "%s\n\nUsage:\n  %s\n", strings.TrimSpace(cmd.Long), cmd.UseLine())
	listed := map[string]bool{}
	for _, g := range settingGroups {
		fs := pflag.NewFlagSet(g.title, pflag.ContinueOnError)
		fs.SortFlags = false // the order of the group, by purpose
		for _, key := range g.keys {
			if f := cmd.Flags().Lookup(key); f != nil {
				fs.AddFlag(f)
				listed[key] = true
			}
		}
		printFlags(out, g.title, fs)
	}
	other := pflag.NewFlagSet("other", pflag.ContinueOnError)
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !listed[f.Name] {
			other.AddFlag(f)
		}
	})
	cmd.InheritedFlags().VisitAll(func(f *pflag.Flag) {
		if other.Lookup(f.Name) == nil {
			other.AddFlag(f)
		}
	})
	printFlags(out, "Other", other)
}

func printFlags(out io.Writer, title string, fs *pflag.FlagSet) {
	if fs.HasFlags() {
		fmt.Fprintf(out, "\n%s:\n%s", title, fs.FlagUsages())
	}
}
