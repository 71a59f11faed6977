"""Video frame handler for TorchServe: variable batch size and resolution, bounded memory."""
