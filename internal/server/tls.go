package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Files of the self-signed certificate `up --tls` makes, under the data dir.
const (
	TLSDir      = "tls"
	TLSCertFile = "cert.pem"
	TLSKeyFile  = "key.pem"
)

// SelfSignedCert returns the data dir's loopback certificate and key,
// making them on first use: ECDSA P-256, valid for 127.0.0.1, ::1 and
// localhost for a year, key at mode 0600. Clients pin this certificate
// (it is its own CA), so nothing else is trusted for the server.
func SelfSignedCert(dataDir string) (certFile, keyFile string, err error) {
	dir := filepath.Join(dataDir, TLSDir)
	certFile, keyFile = filepath.Join(dir, TLSCertFile), filepath.Join(dir, TLSKeyFile)
	if _, err := tls.LoadX509KeyPair(certFile, keyFile); err == nil {
		if c, err := readCert(certFile); err == nil && time.Until(c.NotAfter) > 7*24*time.Hour {
			return certFile, keyFile, nil
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("creating %s: %w", dir, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("generating TLS key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return "", "", fmt.Errorf("generating serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "gpufleet (loopback)"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", fmt.Errorf("creating TLS certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", fmt.Errorf("encoding TLS key: %w", err)
	}
	if err := os.WriteFile(keyFile+".tmp", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", fmt.Errorf("writing TLS key: %w", err)
	}
	if err := os.WriteFile(certFile+".tmp", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", fmt.Errorf("writing TLS certificate: %w", err)
	}
	if err := errors.Join(os.Rename(keyFile+".tmp", keyFile), os.Rename(certFile+".tmp", certFile)); err != nil {
		return "", "", fmt.Errorf("writing TLS files: %w", err)
	}
	return certFile, keyFile, nil
}

func readCert(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return x509.ParseCertificate(b.Bytes)
}

// serverTLS loads the certificate the API serves.
func serverTLS(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading TLS certificate: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, nil
}
