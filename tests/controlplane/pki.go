package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// runPKI writes a fresh CA and, signed by it: the API server's serving certificate
// (127.0.0.1, localhost, the Service IP and any --ip in its SANs, so no client needs
// tls-server-name), the API server's client certificate for kubelets, a
// service-account signing key pair, the front proxy's CA and client certificate
// (front-proxy-ca, front-proxy-client: the API server's identity towards aggregated
// APIs) and, with --node-name, the node's kubelet
// client certificate (CN=system:node:<name>, O=system:nodes: Node authorization and
// NodeRestriction) and serving certificate (the node name and --ip in its SANs).
func runPKI(args []string) int {
	fs := flag.NewFlagSet("pki", flag.ContinueOnError)
	dir := fs.String("dir", "", "folder to write ca.crt, apiserver.{crt,key}, sa.{key,pub} into")
	nodeName := fs.String("node-name", "", "also write kubelet-client.{crt,key} and kubelet-serving.{crt,key} for this node")
	ips := fs.String("ip", "", "comma-separated extra IPs for the API server's and kubelet's SANs")
	if err := fs.Parse(args); err != nil || *dir == "" {
		fmt.Fprintln(os.Stderr, "usage: agentrun-controlplane pki --dir DIR [--node-name NAME] [--ip IP,...]")
		return 2
	}
	var extraIPs []net.IP
	for _, text := range strings.Split(*ips, ",") {
		if text == "" {
			continue
		}
		ip := net.ParseIP(text)
		if ip == nil {
			fmt.Fprintf(os.Stderr, "pki: --ip %q is not an IP address\n", text)
			return 2
		}
		extraIPs = append(extraIPs, ip)
	}
	if err := writePKI(*dir, *nodeName, extraIPs); err != nil {
		fmt.Fprintln(os.Stderr, "pki:", err)
		return 1
	}
	return 0
}

// authority signs leaf certificates with the cluster CA.
type authority struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	serial int64
	now    time.Time
	files  map[string][]byte
}

// newAuthority makes a CA written as <name>.crt and <name>.key (its subject
// agentrun-test-<name>); the certificates it issues go into the same files map.
func newAuthority(now time.Time, name string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	template := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "agentrun-test-" + name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &authority{cert: cert, key: key, serial: 1, now: now, files: map[string][]byte{}}
	ca.files[name+".crt"] = pemBlock("CERTIFICATE", der)
	if err := ca.addKey(name+".key", key); err != nil {
		return nil, err
	}
	return ca, nil
}

// issue writes <name>.crt and <name>.key for a fresh key with this subject and usage.
func (ca *authority) issue(name string, subject pkix.Name, usage x509.ExtKeyUsage, dns []string, ips []net.IP) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	ca.serial++
	template := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial),
		Subject:      subject,
		NotBefore:    ca.now.Add(-time.Hour),
		NotAfter:     ca.now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return err
	}
	ca.files[name+".crt"] = pemBlock("CERTIFICATE", der)
	return ca.addKey(name+".key", key)
}

func (ca *authority) addKey(name string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	ca.files[name] = pemBlock("EC PRIVATE KEY", der)
	return nil
}

func writePKI(dir, nodeName string, extraIPs []net.IP) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, err := newAuthority(time.Now(), "ca")
	if err != nil {
		return err
	}
	// The front proxy's own CA, as kubeadm makes it: the API server forwards requests to
	// aggregated APIs (the operator's history API) with a client certificate from it,
	// and they trust the user it names only from this CA, never from any cluster client.
	proxy, err := newAuthority(ca.now, "front-proxy-ca")
	if err != nil {
		return err
	}
	if err := proxy.issue("front-proxy-client", pkix.Name{CommonName: "front-proxy-client"},
		x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return err
	}
	for name, data := range proxy.files {
		ca.files[name] = data
	}
	serverIPs := append([]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP("10.96.0.1")}, extraIPs...)
	serverDNS := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc.cluster.local"}
	if err := ca.issue("apiserver", pkix.Name{CommonName: "kube-apiserver"},
		x509.ExtKeyUsageServerAuth, serverDNS, serverIPs); err != nil {
		return err
	}
	// The API server's identity towards kubelets (logs, exec); RBAC binds it to
	// system:kubelet-api-admin, so kubelets need no anonymous access.
	if err := ca.issue("apiserver-kubelet-client", pkix.Name{CommonName: "kube-apiserver-kubelet-client"},
		x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return err
	}
	if nodeName != "" {
		if err := ca.issue("kubelet-client",
			pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
			x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
			return err
		}
		if err := ca.issue("kubelet-serving", pkix.Name{CommonName: nodeName},
			x509.ExtKeyUsageServerAuth, []string{nodeName}, extraIPs); err != nil {
			return err
		}
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := ca.addKey("sa.key", saKey); err != nil {
		return err
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	ca.files["sa.pub"] = pemBlock("PUBLIC KEY", saPub)
	for name, data := range ca.files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}
