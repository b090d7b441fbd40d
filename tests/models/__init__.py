"""Small torch.nn.Module definitions of the CNN architectures the model tests
import (torchvision cannot be a dependency; see cnn.py)."""
