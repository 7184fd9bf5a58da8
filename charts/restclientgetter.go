package charts

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// RESTClientGetter serves Helm's actions (action.Configuration.Init) from a
// rest.Config instead of a kubeconfig file. Discovery is cached in memory
// and the REST mapper is resettable, so Helm sees CRDs it has just installed.
type RESTClientGetter struct {
	config    *rest.Config
	namespace string
	discovery discovery.CachedDiscoveryInterface
	mapper    meta.RESTMapper
}

var _ genericclioptions.RESTClientGetter = (*RESTClientGetter)(nil)

// NewRESTClientGetter returns a getter for cfg whose default namespace is
// namespace (required: Helm stores releases there).
func NewRESTClientGetter(cfg *rest.Config, namespace string) (*RESTClientGetter, error) {
	if cfg == nil || namespace == "" {
		return nil, fmt.Errorf("a REST config and a namespace are required (namespace %q)", namespace)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	cached := memory.NewMemCacheClient(dc)
	return &RESTClientGetter{
		config:    rest.CopyConfig(cfg),
		namespace: namespace,
		discovery: cached,
		mapper:    restmapper.NewDeferredDiscoveryRESTMapper(cached),
	}, nil
}

// ToRESTConfig returns a copy of the config.
func (g *RESTClientGetter) ToRESTConfig() (*rest.Config, error) {
	return rest.CopyConfig(g.config), nil
}

// ToDiscoveryClient returns the cached discovery client.
func (g *RESTClientGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	return g.discovery, nil
}

// ToRESTMapper returns a mapper Helm resets after installing CRDs.
func (g *RESTClientGetter) ToRESTMapper() (meta.RESTMapper, error) { return g.mapper, nil }

// ToRawKubeConfigLoader returns a ClientConfig that yields the same config
// and the getter's namespace.
func (g *RESTClientGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return clientConfig{g}
}

// clientConfig is the kubeconfig view of a RESTClientGetter: there is no
// file behind it, so the raw config is empty.
type clientConfig struct{ g *RESTClientGetter }

func (c clientConfig) RawConfig() (clientcmdapi.Config, error) { return clientcmdapi.Config{}, nil }

func (c clientConfig) ClientConfig() (*rest.Config, error) { return c.g.ToRESTConfig() }

func (c clientConfig) Namespace() (string, bool, error) { return c.g.namespace, true, nil }

func (c clientConfig) ConfigAccess() clientcmd.ConfigAccess {
	return clientcmd.NewDefaultClientConfigLoadingRules()
}
