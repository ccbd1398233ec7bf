//! The VCC trace compiler (skeleton; being built on the `vcc` branch).
