/// What can go wrong when embedding.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The model files are missing or unreadable: a deployment problem, reported at start-up.
    #[error("cannot load the embedding model: {0}")]
    Load(String),
    #[error("embedding failed: {0}")]
    Inference(String),
    /// The embedding server could not be reached or answered with an error status; retrying
    /// later may work.
    #[error("embedding server: {0}")]
    Unavailable(String),
    /// The server answered something that is not a valid embeddings response.
    #[error("embedding server sent an invalid response: {0}")]
    Protocol(String),
    #[error("embedding configuration: {0}")]
    Config(String),
}
