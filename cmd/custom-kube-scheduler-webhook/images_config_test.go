package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestServeConfigImages(t *testing.T) {
	for _, s := range serveSettings {
		t.Setenv(s.env, "")
	}
	cfg, err := loadServeConfig(serveFlags(t))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Admission.ImageArchitectures || cfg.Admission.ImageBudget != time.Second || cfg.Images.PullSecrets || cfg.Images.Insecure != nil {
		t.Fatalf("defaults: %+v", cfg.Images)
	}
	t.Setenv("IMAGE_INSECURE_REGISTRIES", " 127.0.0.1:5000, registry.lab:80 ,")
	t.Setenv("IMAGE_PULL_SECRETS", "on")
	t.Setenv("IMAGE_INTERNAL_REGISTRIES", "harbor.svc:443")
	t.Setenv("IMAGE_REFUSED_NETWORKS", "10.100.0.0/16, 192.168.0.0/16")
	if cfg, err = loadServeConfig(serveFlags(t, "--image-architectures=off", "--image-lookup-budget", "250ms")); err != nil {
		t.Fatal(err)
	}
	if cfg.Admission.ImageArchitectures || !cfg.Images.PullSecrets || cfg.Admission.ImageBudget != 250*time.Millisecond || !slices.Equal(cfg.Images.Insecure, []string{"127.0.0.1:5000", "registry.lab:80"}) ||
		!slices.Equal(cfg.Images.Internal, []string{"harbor.svc:443"}) || len(cfg.Images.RefusedNetworks) != 2 || cfg.Images.RefusedNetworks[0].String() != "10.100.0.0/16" {
		t.Fatalf("not read: %+v", cfg.Images)
	}
}

func TestServeConfigImageErrors(t *testing.T) {
	for name, c := range map[string]struct{ env, value, want string }{
		"budget past the deadline": {"IMAGE_LOOKUP_BUDGET", "5s", "less than ADMISSION_DEADLINE"},
		"budget not a duration":    {"IMAGE_LOOKUP_BUDGET", "soon", "IMAGE_LOOKUP_BUDGET"},
		"switch":                   {"IMAGE_ARCHITECTURES", "maybe", "IMAGE_ARCHITECTURES"},
		"a URL, not a registry":    {"IMAGE_INSECURE_REGISTRIES", "http://127.0.0.1:5000/v2", "without a scheme or path"},
		"internal: a URL":          {"IMAGE_INTERNAL_REGISTRIES", "https://harbor/v2", "without a scheme or path"},
		"refused: not a CIDR":      {"IMAGE_REFUSED_NETWORKS", "10.100.0.0", "IMAGE_REFUSED_NETWORKS"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(c.env, c.value)
			_, err := loadServeConfig(serveFlags(t))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%s=%s: %v, want an error saying %q", c.env, c.value, err, c.want)
			}
		})
	}
}
