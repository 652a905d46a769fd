"""The quantizer / parameter server: fp32 weights in, versioned quantized blobs out."""
