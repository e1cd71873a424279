"""Errors meaning "the user's input is wrong": reported without a trace."""

from trainer import checkpoints
from trainer import config
from trainer import distribute
from trainer import model
from trainer import sources
from trainer import train_lib

USER_ERRORS = (config.ConfigError, sources.DataError, model.HandleError,
               distribute.StrategyError, train_lib.TrainingError,
               checkpoints.CheckpointError)
