"""The bundled rollout samples, shipped as package data so an installed skillsft can run them."""
