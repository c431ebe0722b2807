"""Getting and choosing models: the catalog of known builds, the Hugging Face Hub, a pull's plan and
resumable stages, the registry of installed models, settings, and the machine check (`doctor`)."""
