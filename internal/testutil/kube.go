package testutil

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/osthread"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeAPI is a real kube-apiserver with its etcd, on loopback ports, shared
// by the tests of one package (isolate tests by namespace). Alone it has no
// scheduler, kubelet or garbage collector: StartKubeNode adds a real node.
type KubeAPI struct {
	URL    string
	CAData []byte
	Admin  *kubernetes.Clientset
	BinDir string // where scripts/kube-test-bins.sh cached etcd, kube-apiserver and kubectl

	dir          string
	adminToken   string
	tokens       map[string]string // a node component's token by its user name
	etcd, server *exec.Cmd
	node         *KubeNode
}

var (
	kubeOnce   sync.Once
	kubeShared *KubeAPI
	kubeErr    error
)

// errNoKubeBins: the binaries could not be built (no Go module proxy, ...).
var errNoKubeBins = errors.New("kube-apiserver and etcd test binaries could not be built")

// StartKubeAPIServer returns the package's API server, starting it on first
// use (building the binaries with scripts/kube-test-bins.sh if needed; a
// cold build takes minutes). Call StopKubeAPIServer from TestMain.
func StartKubeAPIServer(t testing.TB) *KubeAPI {
	t.Helper()
	api, err := sharedKube()
	if errors.Is(err, errNoKubeBins) {
		t.Log(err)
		Require(t, false, "kube-apiserver + etcd (scripts/kube-test-bins.sh)")
	}
	if err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	return api
}

// sharedKube starts the process's API server on first use; later calls
// get it (or its error).
func sharedKube() (*KubeAPI, error) {
	kubeOnce.Do(func() { kubeShared, kubeErr = startKube() })
	return kubeShared, kubeErr
}

// StopKubeAPIServer stops the package's API server, if one was started.
func StopKubeAPIServer() {
	if kubeShared != nil {
		kubeShared.stop()
	}
}

func kubeBins() (string, error) {
	cmd := exec.Command("bash", filepath.Join(ModuleRoot(), "scripts", "kube-test-bins.sh"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%w: %v\n%s", errNoKubeBins, err, tailString(stderr.String(), 40))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

func startKube() (*KubeAPI, error) {
	bin, err := kubeBins()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sandgate-kube-")
	if err != nil {
		return nil, err
	}
	k := &KubeAPI{dir: dir, BinDir: bin, adminToken: randomHex(16), tokens: map[string]string{}}
	if err := k.start(bin); err != nil {
		k.stop()
		return nil, err
	}
	return k, nil
}

func (k *KubeAPI) start(bin string) error {
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	pe, pp, pa := strconv.Itoa(ports[0]), strconv.Itoa(ports[1]), strconv.Itoa(ports[2])
	if err := k.writeCredentials(); err != nil {
		return err
	}
	etcdURL, peerURL := "http://127.0.0.1:"+pe, "http://127.0.0.1:"+pp
	k.etcd = k.command(filepath.Join(bin, "etcd"), "etcd.log",
		"--data-dir", filepath.Join(k.dir, "etcd"), "--name", "default",
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default="+peerURL, "--unsafe-no-fsync")
	if err := osthread.Start(k.etcd); err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	if err := waitHTTP(etcdURL+"/health", nil, "", 30*time.Second); err != nil {
		return fmt.Errorf("etcd: %w\n%s", err, k.log("etcd.log"))
	}
	k.URL = "https://127.0.0.1:" + pa
	k.server = k.command(filepath.Join(bin, "kube-apiserver"), "apiserver.log",
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+pa,
		"--cert-dir="+filepath.Join(k.dir, "certs"),
		"--tls-cert-file="+filepath.Join(k.dir, "serving.crt"),
		"--tls-private-key-file="+filepath.Join(k.dir, "serving.key"),
		"--service-account-issuer="+k.URL,
		"--service-account-key-file="+filepath.Join(k.dir, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(k.dir, "sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=Node,RBAC",
		// A real node (StartKubeNode) serves Pod logs to the API server,
		// which shows it this certificate (the kubelet trusts the CA).
		"--kubelet-client-certificate="+filepath.Join(k.dir, "kubelet-client.crt"),
		"--kubelet-client-key="+filepath.Join(k.dir, "kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP",
		"--token-auth-file="+filepath.Join(k.dir, "tokens.csv"),
		"--allow-privileged=true",
		// A loopback advertise address needs this: the endpoint reconciler
		// refuses to publish 127.0.0.1 for the kubernetes Service.
		"--endpoint-reconciler-type=none")
	if err := osthread.Start(k.server); err != nil {
		return fmt.Errorf("start kube-apiserver: %w", err)
	}
	if err := waitHTTP(k.URL+"/readyz", k.CAData, k.adminToken, 90*time.Second); err != nil {
		return fmt.Errorf("kube-apiserver: %w\n%s", err, k.log("apiserver.log"))
	}
	k.Admin, err = kubernetes.NewForConfig(k.config(k.adminToken))
	return err
}

// command runs a server in its own process group, logging to dir/logName;
// the kernel kills it if the test binary dies without StopKubeAPIServer
// (started with osthread.Start: the signal is tied to the forking thread,
// and a test's goroutine that exited locked to its thread once took the
// shared kube-apiserver with it).
func (k *KubeAPI) command(path, logName string, args ...string) *exec.Cmd {
	cmd := exec.Command(path, args...)
	if f, err := os.Create(filepath.Join(k.dir, logName)); err == nil {
		cmd.Stdout, cmd.Stderr = f, f
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

func (k *KubeAPI) log(name string) string { return tailFile(filepath.Join(k.dir, name)) }

// tailFile is the last lines of a server's log file, for failures.
func tailFile(path string) string {
	b, _ := os.ReadFile(path)
	return tailString(string(b), 30)
}

func (k *KubeAPI) stop() {
	if k.node != nil {
		k.node.stop()
	}
	for _, c := range []*exec.Cmd{k.server, k.etcd} {
		if c != nil && c.Process != nil {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			_ = c.Wait()
		}
	}
	_ = os.RemoveAll(k.dir)
}

// writeCredentials makes a CA and serving certificate for 127.0.0.1, the
// service-account signing key pair, the static token file (admin and the
// node's components) and the client certificate the API server presents
// to the kubelet.
func (k *KubeAPI) writeCredentials() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sandgate-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: servingIPs(), DNSNames: []string{"localhost"},
	}, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	srvKeyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	k.CAData = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	files := map[string][]byte{
		"serving.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}),
		"serving.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: srvKeyDER}),
		"sa.key":      pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}),
		"sa.pub":      pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub}),
		"tokens.csv":  []byte(k.adminToken + ",admin,admin-uid,system:masters\n" + k.componentTokens()),
		"ca.crt":      k.CAData,
	}
	kcCert, kcKey, err := clientCert(ca, caKey, "kube-apiserver-kubelet-client", now)
	if err != nil {
		return err
	}
	files["kubelet-client.crt"], files["kubelet-client.key"] = kcCert, kcKey
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(k.dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// servingIPs are the serving certificate's addresses: loopback, and every
// node slot's bridge address (scripts/kube-node.sh), where Pods reach the
// API server through KubeNode.ServeAPIToPods.
func servingIPs() []net.IP {
	ips := []net.IP{net.IPv4(127, 0, 0, 1)}
	for slot := range nodeSlots {
		ips = append(ips, net.IPv4(10, 244, byte(slot), 1))
	}
	return ips
}

// config is a client config for the API server with a bearer token.
func (k *KubeAPI) config(token string) *rest.Config {
	return &rest.Config{
		Host:            k.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: k.CAData},
		QPS:             100,
		Burst:           200,
	}
}

// Kubeconfig writes a kubeconfig file for token, with namespace as the
// context's namespace, and returns its path.
func (k *KubeAPI) Kubeconfig(t testing.TB, token, namespace string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := k.WriteKubeconfig(path, token, namespace); err != nil {
		t.Fatalf("write kubeconfig: %v", err)
	}
	return path
}

// WriteKubeconfig is Kubeconfig at path, for a program outside `go test`.
func (k *KubeAPI) WriteKubeconfig(path, token, namespace string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: k.URL, CertificateAuthorityData: k.CAData}
	cfg.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test", Namespace: namespace}
	cfg.CurrentContext = "test"
	return clientcmd.WriteToFile(*cfg, path)
}

var nsUnsafe = regexp.MustCompile(`[^a-z0-9-]+`)

// Namespace creates a fresh namespace named after the test.
func (k *KubeAPI) Namespace(t testing.TB) string {
	t.Helper()
	base := strings.Trim(nsUnsafe.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(base) > 40 {
		base = strings.TrimRight(base[:40], "-")
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: base + "-" + randomHex(4)}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := k.Admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	if err := k.DefaultServiceAccount(ctx, ns.Name); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// DefaultServiceAccount makes the namespace's "default" ServiceAccount,
// which Pods that name none run as: the ServiceAccount admission plugin
// refuses them until it exists, and the controller manager that makes it
// runs only with a node, some time after the namespace.
func (k *KubeAPI) DefaultServiceAccount(ctx context.Context, namespace string) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := k.Admin.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the default service account: %w", err)
	}
	return nil
}

// ApplyRBAC creates the ServiceAccount, Role and RoleBinding of an RBAC
// manifest (multi-document YAML) in namespace and returns a token of the
// manifest's ServiceAccount: a client restricted to exactly that Role.
func (k *KubeAPI) ApplyRBAC(t testing.TB, namespace, manifest string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	token, err := k.RBACToken(ctx, namespace, manifest)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// RBACToken is ApplyRBAC for a program outside `go test` (the bench).
func (k *KubeAPI) RBACToken(ctx context.Context, namespace, manifest string) (string, error) {
	objs, err := DecodeManifest(manifest)
	if err != nil {
		return "", err
	}
	sa := ""
	for _, obj := range objs {
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			o.Namespace, sa = namespace, o.Name
			_, err = k.Admin.CoreV1().ServiceAccounts(namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			o.Namespace = namespace
			_, err = k.Admin.RbacV1().Roles(namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			o.Namespace = namespace
			for i := range o.Subjects {
				o.Subjects[i].Namespace = namespace
			}
			_, err = k.Admin.RbacV1().RoleBindings(namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			err = fmt.Errorf("unexpected %T", obj)
		}
		if err != nil {
			return "", fmt.Errorf("apply %s: %w", manifest, err)
		}
	}
	if sa == "" {
		return "", fmt.Errorf("%s has no ServiceAccount", manifest)
	}
	tr, err := k.Admin.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for service account %s: %w", sa, err)
	}
	return tr.Status.Token, nil
}

// DecodeManifest decodes every document of a YAML manifest file into
// typed Kubernetes objects.
func DecodeManifest(path string) ([]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rd := yaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []any
	for {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		js, err := yaml.ToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", path, err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(js, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("decode %s: %w", path, err)
		}
		out = append(out, obj)
	}
	return out, nil
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitHTTP polls url until it answers 200 with "ok"/"true" in the body.
func waitHTTP(url string, caPEM []byte, token string, timeout time.Duration) error {
	tr := &http.Transport{Proxy: nil}
	if caPEM != nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(caPEM)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	client := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	defer tr.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			var body bytes.Buffer
			_, _ = body.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("status %d: %s", resp.StatusCode, tailString(body.String(), 5))
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %v (last: %s)", url, timeout, last)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func tailString(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
