package config

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/des"
	"crypto/pbkdf2"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"hash"
)

// encryptedPrivateKeyInfo is RFC 5208's EncryptedPrivateKeyInfo.
type encryptedPrivateKeyInfo struct {
	Algorithm pkix.AlgorithmIdentifier
	Data      []byte
}

// pbes2Params is RFC 8018's PBES2-params.
type pbes2Params struct {
	KeyDerivationFunc pkix.AlgorithmIdentifier
	EncryptionScheme  pkix.AlgorithmIdentifier
}

// pbkdf2Params is RFC 8018's PBKDF2-params (salt given as an OCTET STRING).
type pbkdf2Params struct {
	Salt       []byte
	Iterations int
	KeyLength  int                      `asn1:"optional"`
	PRF        pkix.AlgorithmIdentifier `asn1:"optional"`
}

// decryptPKCS8 decrypts an encrypted PKCS#8 private key protected with
// PBES2 (PBKDF2 with HMAC-SHA1/224/256/384/512; AES-128/192/256-CBC or
// DES-EDE3-CBC) and returns the plain PKCS#8 DER. Legacy PBES1 schemes are
// rejected. A wrong password usually shows up as bad padding and is returned
// as a passwordError.
func decryptPKCS8(der, password []byte) ([]byte, error) {
	// Object identifiers of PKCS#5 v2 (RFC 8018) as written by
	// openssl pkcs8 -topk8 -v2 and by Java.
	var (
		oidPBES2          = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 5, 13}
		oidPBKDF2         = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 5, 12}
		oidHMACWithSHA1   = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 7}
		oidHMACWithSHA224 = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 8}
		oidHMACWithSHA256 = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 9}
		oidHMACWithSHA384 = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 10}
		oidHMACWithSHA512 = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 11}
		oidAES128CBC      = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 2}
		oidAES192CBC      = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 22}
		oidAES256CBC      = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 42}
		oidDESEDE3CBC     = asn1.ObjectIdentifier{1, 2, 840, 113549, 3, 7}
	)
	var info encryptedPrivateKeyInfo
	if rest, err := asn1.Unmarshal(der, &info); err != nil || len(rest) > 0 {
		return nil, fmt.Errorf("parse encrypted private key: malformed EncryptedPrivateKeyInfo")
	}
	if !info.Algorithm.Algorithm.Equal(oidPBES2) {
		return nil, fmt.Errorf("unsupported key encryption %v (want PBES2; re-encrypt with openssl pkcs8 -topk8 -v2 aes-256-cbc)", info.Algorithm.Algorithm)
	}
	var params pbes2Params
	if _, err := asn1.Unmarshal(info.Algorithm.Parameters.FullBytes, &params); err != nil {
		return nil, fmt.Errorf("parse PBES2 parameters: %w", err)
	}
	if !params.KeyDerivationFunc.Algorithm.Equal(oidPBKDF2) {
		return nil, fmt.Errorf("unsupported key derivation %v (want PBKDF2)", params.KeyDerivationFunc.Algorithm)
	}
	var kdf pbkdf2Params
	if _, err := asn1.Unmarshal(params.KeyDerivationFunc.Parameters.FullBytes, &kdf); err != nil {
		return nil, fmt.Errorf("parse PBKDF2 parameters: %w", err)
	}
	var prf func() hash.Hash
	switch oid := kdf.PRF.Algorithm; {
	case len(oid) == 0 || oid.Equal(oidHMACWithSHA1):
		prf = sha1.New
	case oid.Equal(oidHMACWithSHA224):
		prf = sha256.New224
	case oid.Equal(oidHMACWithSHA256):
		prf = sha256.New
	case oid.Equal(oidHMACWithSHA384):
		prf = sha512.New384
	case oid.Equal(oidHMACWithSHA512):
		prf = sha512.New
	default:
		return nil, fmt.Errorf("unsupported PBKDF2 hash %v", oid)
	}
	var keyLen int
	var newCipher func([]byte) (cipher.Block, error)
	switch oid := params.EncryptionScheme.Algorithm; {
	case oid.Equal(oidAES128CBC):
		keyLen, newCipher = 16, aes.NewCipher
	case oid.Equal(oidAES192CBC):
		keyLen, newCipher = 24, aes.NewCipher
	case oid.Equal(oidAES256CBC):
		keyLen, newCipher = 32, aes.NewCipher
	case oid.Equal(oidDESEDE3CBC):
		keyLen, newCipher = 24, des.NewTripleDESCipher
	default:
		return nil, fmt.Errorf("unsupported key cipher %v (want AES-CBC or DES-EDE3-CBC)", oid)
	}
	if kdf.KeyLength != 0 && kdf.KeyLength != keyLen {
		return nil, fmt.Errorf("PBKDF2 key length %d does not fit the cipher", kdf.KeyLength)
	}
	var iv []byte
	if _, err := asn1.Unmarshal(params.EncryptionScheme.Parameters.FullBytes, &iv); err != nil {
		return nil, fmt.Errorf("parse cipher IV: %w", err)
	}
	if kdf.Iterations < 1 {
		return nil, fmt.Errorf("invalid PBKDF2 iteration count %d", kdf.Iterations)
	}
	key, err := pbkdf2.Key(prf, string(password), kdf.Salt, kdf.Iterations, keyLen)
	if err != nil {
		return nil, fmt.Errorf("derive key: %w", err)
	}
	block, err := newCipher(key)
	if err != nil {
		return nil, fmt.Errorf("create cipher: %w", err)
	}
	bs := block.BlockSize()
	if len(iv) != bs || len(info.Data) == 0 || len(info.Data)%bs != 0 {
		return nil, fmt.Errorf("malformed encrypted key data")
	}
	plain := make([]byte, len(info.Data))
	cipher.NewCBCDecrypter(block, iv).CryptBlocks(plain, info.Data)
	pad := int(plain[len(plain)-1])
	if pad < 1 || pad > bs {
		return nil, passwordError{"cannot decrypt the private key: wrong password"}
	}
	for _, c := range plain[len(plain)-pad:] {
		if int(c) != pad {
			return nil, passwordError{"cannot decrypt the private key: wrong password"}
		}
	}
	return plain[:len(plain)-pad], nil
}
